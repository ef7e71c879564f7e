"""The MongoDB lease protocol of csrc/stmt_mongodb.c on pymongo.

  acquire: findAndModify without upsert on
             {_id: key, $expr: {$or: [{$eq: ["$owner", owner]},
                                      {$and: [expired by $$NOW, no live reservation]}]}}
           -> $currentDate acquiredAt/renewedAt, $set owner, ttlMs, holdMs 0,
              holder, nextOwner null, holds 1, $inc fence 1;
           when it matches nothing, the same update as an upsert whose query
           ({_id: key, fence: {$exists: false}}) matches no existing record:
           duplicate key (11000) means busy.
  release: updateOne {_id: key, owner: owner} -> owner null, renewedAt now,
           ttlMs 0, holdMs min_hold.
Write concern majority, as the engine sends it.
"""
import os
import secrets
import socket

from pymongo import MongoClient, ReturnDocument
from pymongo.errors import DuplicateKeyError
from pymongo.write_concern import WriteConcern

from . import Busy

EXPIRY = {"$max": [{"$add": ["$renewedAt", "$ttlMs"]}, {"$add": ["$acquiredAt", "$holdMs"]}]}
NO_NEXT = {"$eq": [{"$ifNull": ["$nextOwner", None]}, None]}
NEXT_RUN_OUT = {"$lte": [{"$add": ["$nextAt", "$nextMs"]}, "$$NOW"]}


class MongoLeases:
    def __init__(self, uri, collection=None, label="bench"):
        self.client = MongoClient(uri, socketTimeoutMS=10000, serverSelectionTimeoutMS=5000,
                                  connectTimeoutMS=5000, appname="leaselock-peer")
        db = self.client.get_default_database("leaselock")
        name = collection or "leaselock"
        self.coll = db.get_collection(name, write_concern=WriteConcern(w="majority", wtimeout=5000))
        self.holder = {"host": socket.gethostname(), "pid": os.getpid(), "label": label}

    def close(self):
        self.client.close()

    def acquire(self, key, ttl_ms=30000):
        owner = secrets.token_hex(16)
        update = {
            "$currentDate": {"acquiredAt": True, "renewedAt": True},
            # holds: the owner's reentrant hold count, 1 from an acquire (as the
            # engine writes it since reentrant holds; an engine before them
            # ignores the field).
            "$set": {"owner": owner, "ttlMs": ttl_ms, "holdMs": 0, "holder": self.holder,
                     "nextOwner": None, "holds": 1},
            "$inc": {"fence": 1},
        }
        query = {"_id": key, "$expr": {"$or": [
            {"$eq": ["$owner", owner]},
            {"$and": [{"$lte": [EXPIRY, "$$NOW"]},
                      {"$or": [NO_NEXT, NEXT_RUN_OUT, {"$eq": ["$nextOwner", owner]}]}]}]}}
        doc = self.coll.find_one_and_update(query, update, projection={"fence": 1},
                                            return_document=ReturnDocument.AFTER)
        if doc is None:
            try:
                doc = self.coll.find_one_and_update(
                    {"_id": key, "fence": {"$exists": False}}, update, projection={"fence": 1},
                    upsert=True, return_document=ReturnDocument.AFTER)
            except DuplicateKeyError:
                raise Busy(key) from None
        return owner, int(doc["fence"])

    def release(self, key, owner, min_hold_ms=0):
        r = self.coll.update_one(
            {"_id": key, "owner": owner},
            {"$currentDate": {"renewedAt": True},
             "$set": {"owner": None, "ttlMs": 0, "holdMs": min_hold_ms}})
        return r.matched_count > 0
