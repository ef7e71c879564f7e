"""leaselock: lease-based distributed locks on a database.

    import leaselock

    client = leaselock.connect()            # $LEASELOCK_URI, else embedded SQLite
    lock = client.lock("jobs/nightly", ttl=30)
    with lock:                              # waits, renews in the background
        ...
    with lock.acquire(timeout=5) as lease:  # LockTimeout after 5 s
        write(fence=lease.fence)

    @client.locked("jobs/report")           # skipped (returns None) when busy
    def report(): ...

Durations are seconds (int or float) or datetime.timedelta.

The leases, their renewal, expiry and fencing are the C core's (the
leaselock._leaselock extension); the package's modules add the Python
conveniences, one concern each: _client (Client, connect, records,
durability, the decorator), _lock (Lock), _modes, _semaphore and _rwlock
(Semaphore, RWLock), _aio (the asyncio wait), _lease (Lease.renew's
durations), _args (argument checks) and _fork (what a forked child
forgets).
"""
from . import _fork, _lease  # noqa: F401  (imported for what they set up)
from ._client import Client, Durability, Holder, LockInfo, Record, connect
from ._leaselock import BackendError, Lease, LockError, LockLost, LockTimeout, NotHeld
from ._leaselock import __version__, default_uri
from ._lock import Lock
from ._rwlock import RWLock, RWLockSide
from ._semaphore import Semaphore

__all__ = [
    "connect",
    "Client",
    "Lock",
    "Semaphore",
    "RWLock",
    "RWLockSide",
    "Lease",
    "Holder",
    "Record",
    "LockInfo",
    "Durability",
    "LockError",
    "LockTimeout",
    "NotHeld",
    "LockLost",
    "BackendError",
    "default_uri",
]

# The public classes of the pure-Python layer show as leaselock's own.
for _cls in (Client, Durability, Holder, Lock, LockInfo, Record, RWLock, RWLockSide, Semaphore):
    _cls.__module__ = __name__
del _cls
