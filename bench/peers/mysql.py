"""The MySQL/MariaDB lease protocol on PyMySQL: the engine's own statements
(LL_MYSQL_ACQUIRE and LL_MYSQL_RELEASE from csrc/stmt_mysql.c, a plain
acquire: no reservation claimed), parameters bound in the order
LL_MYSQL_ACQUIRE_PARAMS gives, the session set up as the backend sets it
(utf8mb4, READ COMMITTED, autocommit). The insert id tells the outcome: the
new fence when taken, 0 when busy."""
import os
import secrets
import socket
from urllib.parse import unquote, urlsplit

import pymysql

from . import Busy
from .sqltext import macro


class MySQLLeases:
    def __init__(self, uri, table="leaselock", label="bench"):
        u = urlsplit(uri)
        self.db = pymysql.connect(
            host=u.hostname or "127.0.0.1", port=u.port or 3306, user=unquote(u.username or ""),
            password=unquote(u.password or ""), database=u.path.lstrip("/"), charset="utf8mb4",
            autocommit=True, init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        self.cur = self.db.cursor()
        # "?" placeholders become PyMySQL's "%s" (the text has no other "%").
        self.acquire_sql = (macro("stmt_mysql.c", "LL_MYSQL_ACQUIRE") % table).replace("?", "%s")
        self.release_sql = (macro("stmt_mysql.c", "LL_MYSQL_RELEASE") % table).replace("?", "%s")
        self.params = macro("stmt_mysql.c", "LL_MYSQL_ACQUIRE_PARAMS").replace(" ", "")
        self.host, self.pid, self.label = socket.gethostname(), os.getpid(), label

    def close(self):
        self.db.close()

    def acquire(self, key, ttl_ms=30000):
        owner = secrets.token_hex(16)
        k = key.encode()
        # f: the fence floor, 0 as the backend binds it when no failover was seen.
        values = {"k": k, "o": owner, "f": 0, "t": ttl_ms * 1000, "h": self.host.encode(),
                  "p": self.pid, "l": self.label.encode(), "r": None, "w": None, "q": None}
        self.cur.execute(self.acquire_sql, [values[c] for c in self.params])
        fence = self.cur.lastrowid
        if not fence:
            raise Busy(key)
        return owner, fence

    def release(self, key, owner, min_hold_ms=0):
        return self.cur.execute(self.release_sql, (min_hold_ms * 1000, key.encode(), owner)) == 1
