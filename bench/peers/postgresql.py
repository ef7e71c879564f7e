"""The PostgreSQL lease protocol on psycopg 3: the engine's own statements
(LL_POSTGRESQL_ACQUIRE and LL_POSTGRESQL_RELEASE from
csrc/stmt_postgresql.c, a plain acquire: no reservation claimed), sent as
prepared statements with bound parameters, autocommit. The acquire returns
the new fence, or no row (or a reservation) when busy."""
import os
import re
import secrets
import socket

import psycopg

from . import Busy
from .sqltext import macro


def _psycopg_text(sql, table):
    # "%1$s" is the table; $n become psycopg's named placeholders.
    sql = sql.replace("%1$s", table)
    return re.sub(r"\$(\d+)", r"%(p\1)s", sql)


class PostgreSQLLeases:
    def __init__(self, uri, table="leaselock", label="bench"):
        self.db = psycopg.connect(uri, autocommit=True, prepare_threshold=0)
        self.acquire_sql = _psycopg_text(macro("stmt_postgresql.c", "LL_POSTGRESQL_ACQUIRE"), table)
        self.release_sql = _psycopg_text(macro("stmt_postgresql.c", "LL_POSTGRESQL_RELEASE"), table)
        self.host, self.pid, self.label = socket.gethostname(), os.getpid(), label

    def close(self):
        self.db.close()

    def acquire(self, key, ttl_ms=30000):
        owner = secrets.token_hex(16)
        row = self.db.execute(self.acquire_sql, {
            "p1": key, "p2": owner, "p3": ttl_ms * 1000, "p4": self.host, "p5": self.pid,
            "p6": self.label, "p7": None, "p8": None, "p9": 0}).fetchone()  # p9: no fence floor
        if row is None or row[1]:
            raise Busy(key)
        return owner, int(row[0])

    def release(self, key, owner, min_hold_ms=0):
        cur = self.db.execute(self.release_sql, {"p1": key, "p2": owner, "p3": min_hold_ms * 1000})
        return cur.rowcount == 1
