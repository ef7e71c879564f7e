"""The records' types: Record, LockInfo and Durability, the dicts that
client.info(), client.locks() and client.durability() return. TypedDicts
need typing, which `import leaselock` does not import (it was a fifth of
it): this module is imported when one of them is first named
(leaselock.Record: the package's __getattr__); type checkers and the docs
read it as any other."""
from __future__ import annotations

from typing import Literal, Optional, TypedDict

from ._client import Holder

__all__ = ["Record", "LockInfo", "Durability"]


class Record(TypedDict):
    """A lock's record as the database holds it (client.info(), client.locks()):
    a plain dict with these keys."""

    key: str
    #: None once released (or force-released).
    owner: Optional[str]
    fence: int
    #: Seconds left by the database's clock; <= 0 when expired.
    expires_in: float
    holder: Holder
    #: Reentrant holds of its owner: 1 or more while owned, 0 once released.
    holds: int
    #: Seconds since its owner took it, by the database's clock (None when
    #: released, or when the backend does not say: MongoDB does not yet).
    held_for: Optional[float]
    #: Who waits: the waiter reserved as next owner (its owner token), and
    #: how many wait in the fair queue (None when the backend does not say).
    next_owner: Optional[str]
    queued: Optional[int]


class LockInfo(Record):
    """A lock as its records make it up (client.info(), client.locks()): a
    semaphore's slots and a read-write lock's records count as one lock
    under its key. The Record's keys describe the lock's own record (a
    read-write lock's writer, else its first holder; owner None and fence 0
    when there is none); next_owner and queued are the lock's waiters (a
    semaphore's next fair waiter). mode: "lock", "semaphore" or "rwlock";
    state: "held", "min-hold" (released, still kept by a min_hold) or
    "free"; live: records that block an acquire; holders: the live holders'
    records (a writer first); slots: a semaphore's slot records (its limit
    is at least this many); readers and writer: a read-write lock's shared
    holders and whether a writer holds it."""

    mode: Literal["lock", "semaphore", "rwlock"]
    state: Literal["held", "min-hold", "free"]
    live: int
    holders: list[Record]
    slots: Optional[int]
    readers: Optional[int]
    writer: Optional[bool]


class Durability(TypedDict):
    """How the client's database makes a grant survive a failover, and what
    leaselock did about one (client.durability()): a plain dict with these
    keys. level: "durable" (a grant is on a standby before it is answered),
    "at-risk" (replicas exist, but a grant may be answered first),
    "standalone" (no replica to fail over to) or "unknown". policy: the URI
    option durability= ("report", the default: a warning in the log;
    "require": no grant unless durable; "off"). detail: the server settings
    read. primary: the primary recorded in the table (None when none).
    fence_floor: every fence granted is at least this (0 until a failover).
    lock_delay: seconds more during which no key is granted after a new
    primary (0.0: none). max_ttl: the longest TTL the table grants, in
    seconds, also the lock-delay's length (the URI option max_ttl, 60 s by
    default on PostgreSQL and MySQL/MariaDB; None when there is no bound)."""

    level: Literal["durable", "at-risk", "standalone", "unknown"]
    policy: Literal["report", "require", "off"]
    detail: str
    primary: Optional[str]
    fence_floor: int
    lock_delay: float
    max_ttl: Optional[float]


# Shown as leaselock's own, as the package's other public classes.
for _cls in (Record, LockInfo, Durability):
    _cls.__module__ = "leaselock"
del _cls
