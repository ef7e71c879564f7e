"""The MongoDB lease protocol of csrc/backend_mongodb.c, in pure Python on
pymongo: the baseline bench/python/bench.py compares the binding with.

Same record, same commands, same write concern:
  acquire: findAndModify {_id: key, $expr: {$or: [expired, {$eq: ["$owner", owner]}]}}
           without upsert; when it matches nothing, an upsert whose query
           ({_id: key, fence: {$exists: false}}) matches no existing record,
           where duplicate key 11000 means busy.
  release: updateOne {_id: key, owner: owner} -> owner null, renewedAt now,
           ttlMs 0, holdMs min_hold.
Only what the benchmark needs (acquire and release); no renewal thread.
"""
import os
import secrets
import socket

from pymongo import MongoClient, ReturnDocument
from pymongo.errors import DuplicateKeyError
from pymongo.write_concern import WriteConcern


def _expiry():
    return {"$max": [{"$add": ["$renewedAt", "$ttlMs"]}, {"$add": ["$acquiredAt", "$holdMs"]}]}


class Busy(Exception):
    pass


class PyMongoLeases:
    def __init__(self, uri, collection="leaselock"):
        self.client = MongoClient(uri, socketTimeoutMS=10000, serverSelectionTimeoutMS=5000,
                                  connectTimeoutMS=5000, appname="leaselock-pymongo-bench")
        db = self.client.get_default_database("leaselock")
        self.coll = db.get_collection(
            collection, write_concern=WriteConcern(w="majority", wtimeout=5000))
        self.holder = {"host": socket.gethostname(), "pid": os.getpid(), "label": ""}

    def close(self):
        self.client.close()

    def _update(self, owner, ttl_ms):
        return {
            "$currentDate": {"acquiredAt": True, "renewedAt": True},
            "$set": {"owner": owner, "ttlMs": ttl_ms, "holdMs": 0, "holder": self.holder},
            "$inc": {"fence": 1},
        }

    def acquire(self, key, ttl_ms=30000):
        """Returns (owner, fence); raises Busy when another owner holds it."""
        owner = secrets.token_hex(16)
        update = self._update(owner, ttl_ms)
        doc = self.coll.find_one_and_update(
            {"_id": key,
             "$expr": {"$or": [{"$lte": [_expiry(), "$$NOW"]}, {"$eq": ["$owner", owner]}]}},
            update, projection={"fence": 1}, return_document=ReturnDocument.AFTER)
        if doc is None:
            try:
                doc = self.coll.find_one_and_update(
                    {"_id": key, "fence": {"$exists": False}}, update, projection={"fence": 1},
                    upsert=True, return_document=ReturnDocument.AFTER)
            except DuplicateKeyError:
                raise Busy(key) from None
        return owner, int(doc["fence"])

    def release(self, key, owner, min_hold_ms=0):
        """True when the lease was still this owner's."""
        r = self.coll.update_one(
            {"_id": key, "owner": owner},
            {"$currentDate": {"renewedAt": True},
             "$set": {"owner": None, "ttlMs": 0, "holdMs": min_hold_ms}})
        return r.matched_count > 0
