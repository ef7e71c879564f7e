"""Client: a connection to one lock database (the extension's Client with
the package's conveniences: lock objects, the decorator, records as
dicts), connect(), and the exit hook that closes every client still open."""
from __future__ import annotations

import atexit
import functools
import weakref
from collections import namedtuple

from . import _leaselock
from ._aio import _AsyncLease, _notify
from ._args import _error, _ms
from ._leaselock import Lease, LockError, LockTimeout
from ._lock import Lock
from ._rwlock import RWLock
from ._semaphore import Semaphore

TYPE_CHECKING = False  # typing's, without importing typing (_args.py says why)
if TYPE_CHECKING:
    from typing import (
        Any,
        Callable,
        Coroutine,
        Literal,
        NamedTuple,
        Optional,
        ParamSpec,
        Protocol,
        TypeVar,
        Union,
        overload,
    )

    from ._args import Duration
    from ._records import Durability, LockInfo, Record

    P = ParamSpec("P")
    R = TypeVar("R")
    T = TypeVar("T")

    class _Skipping(Protocol):
        """What client.locked(...) returns: a decorator whose functions return
        None when the lock stays busy (coroutine functions: their coroutine
        does)."""

        @overload
        def __call__(
            self, fn: Callable[P, Coroutine[Any, Any, T]], /
        ) -> Callable[P, Coroutine[Any, Any, Optional[T]]]: ...

        @overload
        def __call__(self, fn: Callable[P, R], /) -> Callable[P, Optional[R]]: ...

    class _Raising(Protocol):
        """What client.locked(..., raise_on_busy=True) returns: a decorator that
        keeps the function's signature (LockTimeout when the lock stays busy)."""

        def __call__(self, fn: Callable[P, R], /) -> Callable[P, R]: ...


# Every open client, so that exit can release what they hold.
_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


if not TYPE_CHECKING:
    # At run time a collections.namedtuple, as typing.NamedTuple makes one
    # (fields, repr, pickling), without importing typing.
    class Holder(namedtuple("Holder", ("host", "pid", "label"))):
        """Who holds (or last held) a lease: for inspection only."""

        __slots__ = ()
        host: str
        pid: int
        label: str | None
else:  # second: the docs generator documents the last definition
    class Holder(NamedTuple):
        """Who holds (or last held) a lease: for inspection only."""

        host: str
        pid: int
        label: Optional[str]


def connect(uri: Optional[str] = None, *, label: Optional[str] = None) -> "Client":
    """Opens a client. uri None: $LEASELOCK_URI, else the embedded SQLite
    default (see default_uri()). label (str) is stored with every lease as
    holder info."""
    return Client(uri, label=label)


def _record(t: _leaselock._Record) -> Record:
    key, owner, fence, expires_ms, host, pid, label, holds, next_owner, queued, held_ms = t
    return {
        "key": key,
        "owner": owner,
        "fence": fence,
        "expires_in": expires_ms / 1000.0,
        "holder": Holder(host, pid, label),
        "holds": holds,
        "held_for": None if held_ms is None else held_ms / 1000.0,
        "next_owner": next_owner,
        "queued": queued,
    }


def _lock_info(t: _leaselock._LockTuple) -> LockInfo:
    key, mode, state, live, rec, holders, slots, readers, writer, next_owner, queued = t
    lead = holders[0] if mode != "lock" and holders else rec
    base = _record(lead) if lead else _record((key, None, 0, 0, "", 0, None, 0, None, None, None))
    return {
        **base,
        "key": key,
        "next_owner": next_owner,
        "queued": queued,
        "mode": mode,
        "state": state,
        "live": live,
        "holders": [_record(h) for h in holders],
        "slots": slots if mode == "semaphore" else None,
        "readers": readers if mode == "rwlock" else None,
        "writer": writer if mode == "rwlock" else None,
    }


class Client(_leaselock.Client):
    """A connection to one lock database. Thread-safe; a context manager
    that closes it. close() releases the leases still held through it;
    a client that is garbage collected without close() releases nothing
    (its Lease objects release their own leases when they go)."""

    def __init__(self, uri: Optional[str] = None, *, label: Optional[str] = None) -> None:
        super().__init__(uri, label=label)
        _clients.add(self)

    def close(self, /) -> None:
        """Releases the leases this client still holds and closes its
        connections. Idempotent; any later use raises ValueError."""
        try:
            super().close()
        finally:
            _notify(None)  # asyncio waiters on this client stop waiting

    def lock(
        self,
        key: str,
        *,
        ttl: Duration = 30.0,
        min_hold: Duration = 0.0,
        auto_renew: bool = True,
        on_lost: Optional[Callable[[Lease], object]] = None,
        on_renew_failed: Optional[Callable[[Lease, LockError, float], object]] = None,
        fair: bool = False,
        reentrant: bool = False,
    ) -> Lock:
        """A Lock on key. Nothing is acquired yet. Durations are seconds or
        datetime.timedelta. on_lost(lease) is called from the renewal
        thread when a lease is lost; it needs auto_renew=True (ValueError
        otherwise). on_renew_failed(lease, error, seconds_left) is called
        from the renewal thread when an automatic renewal failed but the
        lease is not lost yet (it is retried). fair=True grants the key to
        waiters in order of arrival (a queue in the database). reentrant=True
        lets the holder (thread or asyncio task) enter it again. On
        PostgreSQL and MySQL/MariaDB a ttl over the table's max_ttl (60 s
        unless the URI option max_ttl= raises it; see durability()) makes
        the acquire or renew raise ValueError."""
        return Lock(self, key, ttl=ttl, min_hold=min_hold, auto_renew=auto_renew, on_lost=on_lost,
                    on_renew_failed=on_renew_failed, fair=fair, reentrant=reentrant)

    def semaphore(
        self,
        key: str,
        limit: int,
        *,
        ttl: Duration = 30.0,
        min_hold: Duration = 0.0,
        auto_renew: bool = True,
        on_lost: Optional[Callable[[Lease], object]] = None,
        on_renew_failed: Optional[Callable[[Lease, LockError, float], object]] = None,
        fair: bool = False,
    ) -> Semaphore:
        """A counting Semaphore on key: at most limit (1 to 1000) holders at
        once, used like a Lock. Nothing is acquired yet. The options are
        client.lock()'s (not reentrant: each acquire is a holder of its
        own)."""
        return Semaphore(self, key, limit, ttl=ttl, min_hold=min_hold, auto_renew=auto_renew,
                         on_lost=on_lost, on_renew_failed=on_renew_failed, fair=fair)

    def rwlock(
        self,
        key: str,
        *,
        ttl: Duration = 30.0,
        min_hold: Duration = 0.0,
        auto_renew: bool = True,
        on_lost: Optional[Callable[[Lease], object]] = None,
        on_renew_failed: Optional[Callable[[Lease, LockError, float], object]] = None,
        fair: bool = False,
    ) -> RWLock:
        """A read-write lock on key: .shared and .exclusive, each used like
        a Lock. Nothing is acquired yet. The options are client.lock()'s
        (not reentrant)."""
        return RWLock(self, key, ttl=ttl, min_hold=min_hold, auto_renew=auto_renew,
                      on_lost=on_lost, on_renew_failed=on_renew_failed, fair=fair)

    if TYPE_CHECKING:  # typing.overload at run time would import typing
        @overload
        def locked(self, key: str, *, ttl: Duration = ..., timeout: Optional[Duration] = ...,
                   min_hold: Duration = ..., raise_on_busy: Literal[False] = ...) -> _Skipping: ...

        @overload
        def locked(self, key: str, *, ttl: Duration = ..., timeout: Optional[Duration] = ...,
                   min_hold: Duration = ..., raise_on_busy: Literal[True]) -> _Raising: ...

    def locked(
        self,
        key: str,
        *,
        ttl: Duration = 30.0,
        timeout: Optional[Duration] = 0,
        min_hold: Duration = 0.0,
        raise_on_busy: bool = False,
    ) -> Union[_Skipping, _Raising]:
        """Decorator: runs the function under the lock. When the lock stays
        busy for timeout seconds (0: one try; None: wait forever) the call
        is skipped and returns None, or raises LockTimeout with
        raise_on_busy=True. Works on coroutine functions too (their wait
        does not block the event loop). The wrapped function keeps its
        signature; its result type becomes Optional unless raise_on_busy."""
        lock = self.lock(key, ttl=ttl, min_hold=min_hold)
        timeout_ms = _ms(timeout, "timeout", "timeout")
        if not isinstance(raise_on_busy, bool):
            raise _error(TypeError,
                         f"raise_on_busy must be a bool, not {type(raise_on_busy).__name__}")

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            if not callable(fn):
                raise _error(TypeError, f"locked() decorates a callable, not {type(fn).__name__}")
            import inspect  # here, not at import: a tenth of `import leaselock`

            if inspect.iscoroutinefunction(fn):
                @functools.wraps(fn)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    try:
                        lease = await lock._acquire_async_ms(timeout_ms, register=False)
                    except LockTimeout:
                        if raise_on_busy:
                            raise
                        return None
                    async with _AsyncLease(lease):
                        return await fn(*args, **kwargs)

                return async_wrapper

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                try:
                    # raising for a busy one try names the holder (one read)
                    lease = lock._acquire_ms(timeout_ms, None, raise_on_busy)
                except LockTimeout:  # waited timeout_ms: busy all along
                    if raise_on_busy:
                        raise
                    return None
                if lease is None:  # one try: busy
                    if raise_on_busy:
                        raise lock._busy_error()
                    return None
                try:
                    with lease:
                        return fn(*args, **kwargs)
                finally:
                    _notify(lock._key)

            return wrapper

        return decorate

    def info(self, key: str) -> Optional[LockInfo]:
        """The lock key as the database holds it, whatever its mode, or None
        when it has no record: key, owner (None once released), fence,
        expires_in (seconds by the database's clock, <= 0 when expired),
        holder (host, pid, label), holds, held_for, its waiters (next_owner,
        queued), and as a LockInfo its mode, state and holders (a
        semaphore's slots used, a read-write lock's readers and writer). A
        mode's record asked for by its own key (lease.key) is shown alone."""
        t = self._lock_info(key)
        return None if t is None else _lock_info(t)

    def locks(self, prefix: str = "", *, held: bool = False) -> list[LockInfo]:
        """The locks with a record whose key starts with prefix, in key
        order, a mode's records as one lock (as info()); held=True: only
        those that block an acquire (held, or kept by a min_hold)."""
        return [i for i in map(_lock_info, self._locks(prefix)) if not held or i["live"] > 0]

    def durability(self) -> Durability:
        """How the database makes a grant survive a failover, as one of the
        client's connections read it when it was made (at connect and each
        reconnect, never per grant): level, policy, detail, primary,
        fence_floor, lock_delay and max_ttl (seconds). Connects first when
        the client has no connection (bounded by the backend's timeouts):
        BackendError when none can be made."""
        level, policy, detail, primary, floor, delay_ms, max_ttl_ms = self._durability()
        return {
            "level": level,
            "policy": policy,
            "detail": detail,
            "primary": primary or None,
            "fence_floor": floor,
            "lock_delay": delay_ms / 1000.0,
            "max_ttl": max_ttl_ms / 1000.0 if max_ttl_ms > 0 else None,
        }

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<leaselock.Client {self.uri} ({self.backend}) {state}>"


def _at_exit() -> None:
    # Release what is still held, then keep the renewal threads away from
    # the interpreter as it shuts down.
    for client in list(_clients):
        try:
            client.close()
        except Exception:
            pass
    _leaselock._shutdown()


atexit.register(_at_exit)
