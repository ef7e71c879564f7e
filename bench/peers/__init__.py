"""Pure-Python implementations of the leaselock protocol, one per server
backend, each on that database's usual Python driver: the baselines that
bench/report/run.py compares the binding with (pairs of acquire + release
against the same server and the same table or collection).

Each peer has acquire(key, ttl_ms=30000) -> (owner, fence), raising Busy when
another owner holds the key, release(key, owner, min_hold_ms=0) -> bool and
close(). Owners are 128 random bits from the OS (secrets.token_hex), as the
engine makes them; expiry is judged by the database's clock; every take
increments the fence; release is a conditional update on key and owner.
"""


class Busy(Exception):
    """Another owner holds the key."""


def open_peer(backend, uri):
    """The peer for BACKEND ("mongodb", "mysql", "postgresql") on URI."""
    if backend == "mongodb":
        from .mongodb import MongoLeases
        return MongoLeases(uri)
    if backend == "mysql":
        from .mysql import MySQLLeases
        return MySQLLeases(uri)
    if backend == "postgresql":
        from .postgresql import PostgreSQLLeases
        return PostgreSQLLeases(uri)
    raise ValueError(f"no pure-Python peer for {backend}")


def driver_version(backend):
    """The driver a peer uses, with its version ("pymongo 4.14.1")."""
    from importlib.metadata import version
    name = {"mongodb": "pymongo", "mysql": "PyMySQL", "postgresql": "psycopg"}[backend]
    return f"{name} {version(name)}"
