"""RWLock: a read-write lock across processes and machines, and its two
sides (RWLockSide)."""
from __future__ import annotations

from . import _leaselock
from ._aio import _who
from ._args import _error
from ._leaselock import Lease, LockError, LockTimeout
from ._lock import _my_holds, _Named
from ._modes import _ModeLock, _live

TYPE_CHECKING = False  # typing's, without importing typing (_args.py says why)
if TYPE_CHECKING:
    from typing import Callable, Literal, Optional

    from ._args import Duration

# The longest suffix it adds to the key for its records (leaselock.h).
_RWLOCK_SUFFIX = len("/.rw/r/") + 32


def _reader_name(rest: str) -> bool:
    return len(rest) == 32 and all(c in "0123456789abcdef" for c in rest)


class RWLockSide(_ModeLock):
    """One side of a RWLock (rwlock.shared or rwlock.exclusive), used like a
    Lock: `with side:`, `side.acquire(timeout=...)`, `side.try_acquire()`,
    `side.release()`, `async with side:`. Any number of shared holders or
    one exclusive holder; each holder has a lease of its own (lease.key:
    key + "/.rw/r/<token>" for a shared one, key + "/.rw/w" for the
    exclusive one, whose fence grows with each writer).

    Not reentrant (no reentrant argument). The shared side may be held
    several times by one thread, each a holder of its own (but a writer
    waiting in between makes the later ones wait for it). A thread (or
    task) that holds the exclusive side through this RWLock (or another of
    the same client on the key) and asks for either side again, or holds
    the shared side and asks for the exclusive one, gets RuntimeError
    instead of waiting for itself: there is no upgrade or downgrade;
    release first.
    """

    __slots__ = ("_rwlock",)
    _NOUN = "read-write lock"

    def __init__(self, rwlock: "RWLock", mode: Literal["shared", "exclusive"]) -> None:
        super().__init__(rwlock._client, rwlock._key, mode, 0, _RWLOCK_SUFFIX,
                         "read-write lock", ttl=rwlock._ttl, min_hold=rwlock._min_hold,
                         auto_renew=rwlock._auto_renew, on_lost=rwlock._on_lost,
                         on_renew_failed=rwlock._on_renew_failed, fair=rwlock._fair)
        self._rwlock = rwlock  # a cycle, for the collector: each side checks the other

    @property
    def mode(self) -> Literal["shared", "exclusive"]:
        return "shared" if self._mode == "shared" else "exclusive"

    @property
    def limit(self) -> Optional[int]:
        """How many may hold this side at once: 1 for the exclusive side,
        None (any number) for the shared one."""
        return None if self._mode == "shared" else 1

    def _check_not_mine(self) -> None:
        rw = self._rwlock
        who = _who()
        if rw._exclusive._mine():
            raise _error(RuntimeError, f'"{self._key}" is held exclusively by this {who} '
                         "through this read-write lock: it would wait for itself "
                         "(read-write locks are not reentrant)")
        if self._mode == "exclusive" and rw._shared._mine():
            raise _error(RuntimeError, f'"{self._key}" is held shared by this {who} through '
                         "this read-write lock: an exclusive acquire would wait for itself "
                         "(release the shared hold first)")
        # Through another RWLock of the client on the key (its records).
        modes = {mode for _, mode in _my_holds(self._client, self._wake)}
        if "exclusive" in modes:
            raise _error(RuntimeError, f'"{self._key}" is held exclusively by this {who} '
                         "through another read-write lock of this client: it would wait "
                         "for itself (read-write locks are not reentrant)")
        if self._mode == "exclusive" and "shared" in modes:
            raise _error(RuntimeError, f'"{self._key}" is held shared by this {who} through '
                         "another read-write lock of this client: an exclusive acquire "
                         "would wait for itself (release the shared hold first)")

    def locked(self) -> bool:
        """True when an acquire of this side would wait now (by the
        database's clock): the exclusive record is live (a writer holds it
        or waits for readers), or, for the exclusive side, a reader is in."""
        t = self._client._inspect(f"{self._key}/.rw/w")
        if t is not None and t[3] > 0:
            return True
        return self._mode == "exclusive" and \
            _live(self._client, f"{self._key}/.rw/r/", _reader_name) > 0

    def _busy_error(self) -> LockTimeout:
        why = "a writer is in or next" if self._mode == "shared" else "held by another owner"
        return _error(LockTimeout, f'read-write lock "{self._key}" ({self._mode}): {why}',
                      "BUSY")

    def _waited_for(self) -> str:
        return f'the {self._mode} side of the read-write lock "{self._key}"'

    def _repr_name(self) -> str:
        return f"RWLockSide {self._key!r} {self._mode}"


class RWLock(_Named):
    """A read-write lock across processes and machines: any number of
    holders of .shared or one holder of .exclusive, each a lease of its
    own. A writer that waits is not starved by a stream of readers: once
    it holds the exclusive record new readers wait, and it waits only for
    the readers already in (within its timeout; then it lets go). fair=True
    serves writers, and readers waiting for a writer, in order of arrival.
    Both are the blocking acquire's: an asyncio wait (acquire_async,
    async with) polls one-try acquires and holds nothing between them.
    Not reentrant: see RWLockSide.
    """

    __slots__ = ("_client", "_key", "_ttl", "_min_hold", "_auto_renew", "_on_lost",
                 "_on_renew_failed", "_fair", "_shared", "_exclusive", "__weakref__")

    def __init__(self, client: _leaselock.Client, key: str, *, ttl: Duration = 30.0,
                 min_hold: Duration = 0.0, auto_renew: bool = True,
                 on_lost: Optional[Callable[[Lease], object]] = None,
                 on_renew_failed: Optional[Callable[[Lease, LockError, float], object]] = None,
                 fair: bool = False) -> None:
        self._client = client
        self._key = key
        self._ttl, self._min_hold, self._auto_renew = ttl, min_hold, auto_renew
        self._on_lost, self._on_renew_failed, self._fair = on_lost, on_renew_failed, fair
        # The sides check the arguments (as Lock does).
        self._shared = RWLockSide(self, "shared")
        self._exclusive = RWLockSide(self, "exclusive")
        self._key = self._shared.key

    @property
    def shared(self) -> RWLockSide:
        """The readers' side."""
        return self._shared

    @property
    def exclusive(self) -> RWLockSide:
        """The writer's side."""
        return self._exclusive

    def __repr__(self) -> str:
        held = [s._mode for s in (self._shared, self._exclusive) if s._mine()]
        state = f"held {held[0]} here" if held else "not held here"
        if self._client.closed:
            state = "client closed"
        return f"<leaselock.RWLock {self._key!r} ttl={self._shared.ttl:g}s {state}>"
