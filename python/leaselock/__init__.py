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
durations), _args (argument checks), _fork (what a forked child
forgets) and _records (the records' TypedDicts, imported when first named:
they need typing, which the import of the package does not import).
"""
from . import _fork, _lease  # noqa: F401  (imported for what they set up)
from ._client import Client, Holder, connect
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

# The public classes of the pure-Python layer show as leaselock's own
# (_records.py does so for its own).
for _cls in (Client, Holder, Lock, RWLock, RWLockSide, Semaphore):
    _cls.__module__ = __name__
del _cls

# The records' TypedDicts need typing, a fifth of `import leaselock` when it
# imported it: _records.py is imported when one of them is first named. Type
# checkers read the import below (typing's TYPE_CHECKING without typing);
# they do not see __getattr__, so a misspelt name stays an error for them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._records import Durability, LockInfo, Record
else:
    _RECORDS = frozenset(("Durability", "LockInfo", "Record"))

    def __getattr__(name: str) -> object:
        if name in _RECORDS:
            from . import _records

            value = globals()[name] = getattr(_records, name)
            return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(globals()) | _RECORDS)
del TYPE_CHECKING
