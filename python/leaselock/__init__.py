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
leaselock._leaselock extension); leaselock._lock adds the Python
conveniences: Lock objects, context managers, the decorator and asyncio.
"""
from ._leaselock import (
    BackendError,
    Lease,
    LockError,
    LockLost,
    LockTimeout,
    NotHeld,
    __version__,
    default_uri,
)
from ._lock import Client, Holder, Lock, Record, RWLock, RWLockSide, Semaphore, connect

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
    "LockError",
    "LockTimeout",
    "NotHeld",
    "LockLost",
    "BackendError",
    "default_uri",
]

# The public classes of the pure-Python layer show as leaselock's own.
for _cls in (Client, Holder, Lock, Record, RWLock, RWLockSide, Semaphore):
    _cls.__module__ = __name__
del _cls
