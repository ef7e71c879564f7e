"""The package's Python layer: clients, Lock objects, context managers, the
decorator and asyncio, over the C core (leaselock._leaselock). The public
names are re-exported by leaselock/__init__.py; nothing here is public by
itself."""
from __future__ import annotations

import asyncio
import atexit
import functools
import inspect
import os
import random
import threading
import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import (
    Any,
    Callable,
    Coroutine,
    Literal,
    NamedTuple,
    Optional,
    ParamSpec,
    Protocol,
    TypedDict,
    TypeVar,
    Union,
    overload,
)

from . import _leaselock
from ._leaselock import (
    BackendError,
    Lease,
    LockError,
    LockLost,
    LockTimeout,
    NotHeld,
    default_uri,
)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

#: A duration: seconds (int or float) or a datetime.timedelta.
Duration = Union[float, timedelta]


class Holder(NamedTuple):
    """Who holds (or last held) a lease: for inspection only."""

    host: str
    pid: int
    label: Optional[str]


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


_check_key = _leaselock._check_key
_get_running_loop = asyncio._get_running_loop
_seconds = _leaselock._seconds

# Every open client and every Lock, so exit can release and a forked
# child can forget what its parent's threads held.
_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()
_locks: "weakref.WeakSet[Lock]" = weakref.WeakSet()


def connect(uri: Optional[str] = None, *, label: Optional[str] = None) -> "Client":
    """Opens a client. uri None: $LEASELOCK_URI, else the embedded SQLite
    default (see default_uri()). label (str) is stored with every lease as
    holder info."""
    return Client(uri, label=label)


E = TypeVar("E", bound=BaseException)


def _error(cls: type[E], message: str, code: str = "INVALID") -> E:
    """cls(message) carrying code (INVALID: as the extension raises for bad
    arguments and use after close)."""
    e = cls(message)
    setattr(e, "code", code)
    return e


def _ms(value: object, name: str, kind: str) -> int:
    """A duration in milliseconds: seconds (int or float) or a
    datetime.timedelta; kind "ttl" (1 ms .. 30 days), "duration" (0 .. 30
    days) or "timeout" (also None: forever). Bad types raise TypeError, bad
    values ValueError, both with .code "INVALID"."""
    if isinstance(value, timedelta):
        return _seconds(value.total_seconds(), name, kind)
    if (isinstance(value, (int, float)) and not isinstance(value, bool)) or (
            value is None and kind == "timeout"):
        return _seconds(value, name, kind)
    none = " or None" if kind == "timeout" else ""
    raise _error(TypeError, f"{name} must be a number of seconds (int or float) or a "
                 f"datetime.timedelta{none}, not {type(value).__name__}")


# Lease.renew takes durations as the rest of the package does: seconds or a
# datetime.timedelta. The extension's method takes seconds; this wrapper,
# set on the extension's type, converts a timedelta (for ttl and for any
# other duration the method takes) and leaves the checks of values
# to the method. inspect.signature() and help() show the method's own.
_c_renew = getattr(Lease.renew, "__wrapped__", Lease.renew)  # once, also on a reload


@functools.wraps(_c_renew)
def _renew(self: Lease, /, ttl: Optional[Duration] = None, *args: Any, **kwargs: Any) -> None:
    if isinstance(ttl, timedelta):
        ttl = ttl.total_seconds()
    elif ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float))):
        raise _error(TypeError, "ttl must be a number of seconds (int or float) or a "
                     f"datetime.timedelta or None, not {type(ttl).__name__}")
    args = tuple(a.total_seconds() if isinstance(a, timedelta) else a for a in args)
    for name, value in kwargs.items():
        if isinstance(value, timedelta):
            kwargs[name] = value.total_seconds()
    _c_renew(self, ttl, *args, **kwargs)


_renew.__doc__ = f"{_c_renew.__doc__ or ''} Durations may also be datetime.timedelta.".strip()
setattr(Lease, "renew", _renew)


def _record(t: tuple[str, Optional[str], int, int, str, int, Optional[str], int]) -> Record:
    key, owner, fence, expires_ms, host, pid, label, holds = t
    return {
        "key": key,
        "owner": owner,
        "fence": fence,
        "expires_in": expires_ms / 1000.0,
        "holder": Holder(host, pid, label),
        "holds": holds,
    }


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
    ) -> "Lock":
        """A Lock on key. Nothing is acquired yet. Durations are seconds or
        datetime.timedelta. on_lost(lease) is called from the renewal
        thread when a lease is lost; it needs auto_renew=True (ValueError
        otherwise). on_renew_failed(lease, error, seconds_left) is called
        from the renewal thread when an automatic renewal failed but the
        lease is not lost yet (it is retried). fair=True grants the key to
        waiters in order of arrival (a queue in the database). reentrant=True
        lets the holder (thread or asyncio task) enter it again."""
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
    ) -> "Semaphore":
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
    ) -> "RWLock":
        """A read-write lock on key: .shared and .exclusive, each used like
        a Lock. Nothing is acquired yet. The options are client.lock()'s
        (not reentrant)."""
        return RWLock(self, key, ttl=ttl, min_hold=min_hold, auto_renew=auto_renew,
                      on_lost=on_lost, on_renew_failed=on_renew_failed, fair=fair)

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
                    lease = lock._acquire_ms(timeout_ms, None)
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

    def info(self, key: str) -> Optional[Record]:
        """The record of key as the database holds it, or None: key, owner
        (None once released), fence, expires_in (seconds by the database's
        clock, <= 0 when expired) and holder (host, pid, label)."""
        t = self._inspect(key)
        return None if t is None else _record(t)

    def locks(self, prefix: str = "") -> list[Record]:
        """The records whose key starts with prefix, in key order."""
        return [_record(t) for t in self._list(prefix)]

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<leaselock.Client {self.uri} ({self.backend}) {state}>"


def _current_task() -> Optional["asyncio.Task[Any]"]:
    """The asyncio task running on this thread, if any."""
    loop = _get_running_loop()
    return None if loop is None else asyncio.current_task(loop)


# ---- asyncio: the wait without a thread per waiter ---------------------------
#
# A waiting task costs no OS thread. Each try is one non-blocking acquire
# (timeout 0), run in a small shared pool (_POOL_THREADS threads for the
# whole process, also used for releases); between tries the task sleeps on
# its event loop for the core's backoff (full jitter, uniform in
# 1 ms .. min(1 s, 5 ms * 2^attempt)), woken at once when the package
# releases a lease on the same key in this process (_notify). The tasks of
# one loop waiting on one key of one client queue up in a _Gate: only the
# first polls the database, the others wait their turn in arrival order.

_POOL_THREADS = 4
_pool: Optional[ThreadPoolExecutor] = None
_pool_mu = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    pool = _pool
    if pool is None:
        with _pool_mu:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=_POOL_THREADS,
                                           thread_name_prefix="leaselock-async")
            pool = _pool
    return pool


# key -> the (loop, event) of each task polling for that key.
_wakers: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
_wakers_mu = threading.Lock()


def _notify(key: Optional[str]) -> None:
    """A lease on key (None: any key) was released in this process: the
    tasks polling for it try again now. Callable from any thread."""
    with _wakers_mu:
        if key is None:
            targets = [w for ws in _wakers.values() for w in ws]
        else:
            targets = list(_wakers.get(key, ()))
    for loop, event in targets:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # its loop is closed
            pass


class _Gate:
    """The turn of the tasks of one loop waiting for one key of one client,
    in arrival order."""

    __slots__ = ("busy", "queue", "users")

    def __init__(self) -> None:
        self.busy = False
        self.queue: deque[asyncio.Future[bool]] = deque()
        self.users = 0

    async def enter(self, loop: asyncio.AbstractEventLoop, deadline: Optional[float]) -> bool:
        """Waits for the turn: True once it is ours, False when the
        deadline (loop time) passed first."""
        if not self.busy and not self.queue:
            self.busy = True
            return True
        fut: asyncio.Future[bool] = loop.create_future()
        self.queue.append(fut)
        timer = None if deadline is None else loop.call_at(deadline, _turn_timeout, fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.result():
                self.leave()  # handed the turn, then cancelled: pass it on
            raise
        finally:
            if timer is not None:
                timer.cancel()
            try:
                self.queue.remove(fut)
            except ValueError:
                pass

    def leave(self) -> None:
        while self.queue:
            fut = self.queue.popleft()
            if not fut.done():
                fut.set_result(True)
                return
        self.busy = False


def _turn_timeout(fut: "asyncio.Future[bool]") -> None:
    if not fut.done():
        fut.set_result(False)


# (loop, client, key) -> its gate, while a task uses it. Loops may run in
# several threads: the mapping is shared, each gate is its loop's.
_gates: dict[tuple[asyncio.AbstractEventLoop, Any, str], _Gate] = {}
_gates_mu = threading.Lock()


def _gate_use(where: tuple[asyncio.AbstractEventLoop, Any, str]) -> _Gate:
    with _gates_mu:
        gate = _gates.get(where)
        if gate is None:
            gate = _gates[where] = _Gate()
        gate.users += 1
        return gate


def _gate_done(where: tuple[asyncio.AbstractEventLoop, Any, str], gate: _Gate) -> None:
    with _gates_mu:
        gate.users -= 1
        if gate.users == 0 and _gates.get(where) is gate:
            del _gates[where]


async def _release_off_loop(lease: Lease, wake: Optional[str] = None) -> None:
    """Releases lease in the pool, and waits for it even if cancelled."""
    loop = asyncio.get_running_loop()
    try:
        done = loop.run_in_executor(_executor(), _release_quietly, lease, wake)
    except RuntimeError:  # the pool is shut down
        _release_quietly(lease, wake)
        return
    try:
        await asyncio.shield(done)
    except asyncio.CancelledError:
        pass


class Lock:
    """A named lock on a client, like threading.Lock across processes and
    machines: `with lock:`, `lock.acquire(timeout=...)` (returns the Lease),
    `lock.release()`, `async with lock:`.

    Not reentrant unless reentrant=True: a thread (or asyncio task) that
    holds it through this Lock object and asks again gets RuntimeError
    instead of waiting for itself. With reentrant=True it enters again: the
    same Lease (and fence), one more hold counted in the record, and each
    release (or with-block exit) lets one hold go, the last the key.
    Several threads may share one Lock object; each waits its turn.

    on_lost(lease) is called from the renewal thread when a lease taken
    through this Lock is lost; it needs auto_renew=True, so passing it with
    auto_renew=False raises ValueError.
    """

    __slots__ = ("_client", "_key", "_ttl_ms", "_min_hold_ms", "_auto_renew", "_on_lost",
                 "_on_renew_failed", "_fair", "_reentrant", "_threads", "_tasks", "_wake",
                 "__weakref__")

    #: What the messages call this object.
    _NOUN = "Lock"

    def __init__(self, client: _leaselock.Client, key: str, *, ttl: Duration = 30.0,
                 min_hold: Duration = 0.0, auto_renew: bool = True,
                 on_lost: Optional[Callable[[Lease], object]] = None,
                 on_renew_failed: Optional[Callable[[Lease, LockError, float], object]] = None,
                 fair: bool = False, reentrant: bool = False) -> None:
        if not isinstance(client, _leaselock.Client):
            raise _error(TypeError,
                         f"client must be a leaselock.Client, not {type(client).__name__}")
        self._key = _check_key(key, "key")
        # The name under which this process's releases wake its asyncio
        # waiters (_notify) and they queue (_Gate): the key, for a lock.
        self._wake = self._key
        self._ttl_ms = _ms(ttl, "ttl", "ttl")
        self._min_hold_ms = _ms(min_hold, "min_hold", "duration")
        if not isinstance(auto_renew, bool):
            raise _error(TypeError, f"auto_renew must be a bool, not {type(auto_renew).__name__}")
        if not isinstance(fair, bool):
            raise _error(TypeError, f"fair must be a bool, not {type(fair).__name__}")
        if not isinstance(reentrant, bool):
            raise _error(TypeError, f"reentrant must be a bool, not {type(reentrant).__name__}")
        if on_lost is not None and not callable(on_lost):
            raise _error(TypeError,
                         f"on_lost must be callable or None, not {type(on_lost).__name__}")
        if on_lost is not None and not auto_renew:
            # The core calls on_lost from its renewal thread only.
            raise _error(ValueError, "on_lost needs auto_renew=True: without renewal the "
                         "loss is found only by the lease's own calls (lease.lost, "
                         "renew(), release() or the with-block's exit)")
        if client.closed:
            raise _error(ValueError, "I/O operation on a closed client")
        self._client = client
        self._auto_renew = auto_renew
        self._fair = fair
        self._reentrant = reentrant
        self._on_lost = on_lost
        self._on_renew_failed = on_renew_failed
        # What each thread, and each asyncio task, took through this Lock:
        # [(lease, taken by a with-block on this Lock)], oldest first. Kept
        # per thread in thread-local storage and per task in a weak-keyed
        # mapping, not by thread or task id: both are reused once their
        # thread or task is gone.
        self._threads = threading.local()
        self._tasks: "weakref.WeakKeyDictionary[asyncio.Task[Any], list[tuple[Lease, bool]]]" = \
            weakref.WeakKeyDictionary()
        _locks.add(self)

    # -- properties ------------------------------------------------------
    @property
    def key(self) -> str:
        return self._key

    @property
    def ttl(self) -> float:
        return self._ttl_ms / 1000.0

    @property
    def min_hold(self) -> float:
        return self._min_hold_ms / 1000.0

    @property
    def fair(self) -> bool:
        return self._fair

    @property
    def reentrant(self) -> bool:
        return self._reentrant

    @property
    def client(self) -> _leaselock.Client:
        return self._client

    # -- core calls --------------------------------------------------------
    def _acquire_ms(self, timeout_ms: int, cancel: Any) -> Optional[Lease]:
        return self._client._acquire(self._key, ttl_ms=self._ttl_ms, timeout_ms=timeout_ms,
                                     min_hold_ms=self._min_hold_ms, auto_renew=self._auto_renew,
                                     on_lost=self._on_lost, cancel=cancel,
                                     on_renew_failed=self._on_renew_failed, fair=self._fair)

    def _busy_error(self) -> LockTimeout:
        return _error(LockTimeout, f'"{self._key}" is held by another owner', "BUSY")

    def _timeout_error(self, waited: float) -> LockTimeout:
        return _error(LockTimeout, f'timed out after {round(waited * 1000)} ms waiting for '
                      f'"{self._key}" (held by another owner)', "TIMEOUT")

    def _stack(self, create: bool = False) -> Optional[list[tuple[Lease, bool]]]:
        """The leases of the calling task (else thread) through this Lock."""
        task = _current_task()
        stack: Optional[list[tuple[Lease, bool]]]
        if task is not None:
            stack = self._tasks.get(task)
            if stack is None and create:
                stack = self._tasks[task] = []
            return stack
        stack = getattr(self._threads, "stack", None)
        if stack is None and create:
            stack = self._threads.stack = []
        return stack

    def _mine(self) -> bool:
        """True when the caller holds a lease through this Lock now. Reads
        only: a lost lease stays until its with-block (or release()) ends."""
        stack = self._stack()
        return bool(stack) and any(lease.held for lease, _ in stack or ())

    def _check_not_mine(self) -> None:
        if self._mine():
            who = "task" if _current_task() is not None else "thread"
            raise _error(RuntimeError,
                         f'"{self._key}" is already held by this {who} through this Lock; '
                         "pass reentrant=True to enter it again")

    def _held_by_me(self) -> Optional[Lease]:
        """With reentrant=True, the lease the caller holds through this Lock
        (the innermost); None when it holds none (or may not re-enter)."""
        if not self._reentrant:
            self._check_not_mine()
            return None
        for lease, _ in reversed(self._stack() or ()):
            if lease.held:
                return lease
        return None

    def _push(self, lease: Lease, block: bool) -> None:
        """Records a lease the caller took; block: by entering a with-block
        on the Lock, whose exit reports and releases that one lease."""
        stack = self._stack(True)
        assert stack is not None
        if stack:
            # Forget the leases released meanwhile (lease.release(), a
            # with-block on the lease): neither held nor lost.
            stack[:] = [e for e in stack if e[0].held or e[0].lost]
        stack.append((lease, block))

    def _take(self, timeout_ms: int, block: bool) -> Lease:
        mine = self._held_by_me()
        if mine is not None:
            mine._reenter()
            self._push(mine, block)
            return mine
        lease = self._acquire_ms(timeout_ms, None)
        if lease is None:
            raise self._busy_error()
        self._push(lease, block)
        return lease

    def _pop_block(self) -> Optional[Lease]:
        """Takes the lease of the caller's innermost with-block."""
        stack = self._stack()
        if stack:
            for i in range(len(stack) - 1, -1, -1):
                if stack[i][1]:
                    return stack.pop(i)[0]
        return None

    # -- the threading.Lock-like API --------------------------------------------
    def acquire(self, timeout: Optional[Duration] = None) -> Lease:
        """Blocks until acquired (timeout in seconds or a timedelta; None:
        forever; 0: one try) and returns the Lease (a context manager).
        Raises LockTimeout when the time runs out. Ctrl-C stops the wait."""
        return self._take(_ms(timeout, "timeout", "timeout"), False)

    def try_acquire(self) -> Optional[Lease]:
        """One try: the Lease, or None when another owner holds the key."""
        mine = self._held_by_me()
        if mine is not None:
            mine._reenter()
            self._push(mine, False)
            return mine
        lease = self._acquire_ms(0, None)
        if lease is not None:
            self._push(lease, False)
        return lease

    def release(self) -> None:
        """Releases the lease this thread (or task) took last through this
        Lock. Raises NotHeld when it holds none, or no longer holds it."""
        stack = self._stack()
        if not stack:
            raise _error(NotHeld, f'"{self._key}" is not held by this thread through this '
                         f'{self._NOUN}', "NOT_HELD")
        try:
            stack.pop()[0].release()
        finally:
            _notify(self._wake)

    def locked(self) -> bool:
        """True when some owner holds the key now (by the database's clock),
        including a released lease still inside its min_hold."""
        t = self._client._inspect(self._key)
        return t is not None and t[3] > 0  # expires_in (ms) by the database's clock

    def __enter__(self) -> Lease:
        return self._take(-1, True)

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        lease = self._pop_block()
        if lease is not None:
            try:
                lease.__exit__(et, ev, tb)
            finally:
                _notify(self._wake)

    # -- asyncio -------------------------------------------------------------
    async def _try_async(self, loop: asyncio.AbstractEventLoop) -> Optional[Lease]:
        """One try (timeout 0) in the pool: the Lease, or None when busy."""
        lease, _ = await self._in_pool(loop, lambda: (self._acquire_ms(0, None), 0.0))
        return lease

    async def _in_pool(self, loop: asyncio.AbstractEventLoop,
                       call: Callable[[], tuple[Optional[Lease], float]],
                       ) -> tuple[Optional[Lease], float]:
        """call() (a try: the Lease or None, and the time to sleep before the
        next) in the pool. A lease that arrives after the caller was
        cancelled is released."""
        fut: asyncio.Future[tuple[Optional[Lease], float]] = loop.create_future()

        def deliver(lease: Optional[Lease], sleep: float,
                    exc: Optional[BaseException]) -> None:
            if fut.cancelled():
                # The task gave up while the try went on: never leak it.
                if lease is not None:
                    _executor().submit(_release_quietly, lease, self._wake)
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result((lease, sleep))

        def work() -> None:
            lease, sleep, exc = None, 0.0, None
            try:
                lease, sleep = call()
            except BaseException as e:  # delivered to the awaiting task
                exc = e
            try:
                loop.call_soon_threadsafe(deliver, lease, sleep, exc)
            except RuntimeError:  # the loop is closed
                if lease is not None:
                    _release_quietly(lease, self._wake)

        _executor().submit(work)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                # The lease was delivered, then the task was cancelled
                # before it resumed: release it (off the event loop) before
                # the cancellation goes on, whatever else cancels us.
                lease = fut.result()[0]
                if lease is not None:
                    await _release_off_loop(lease, self._wake)
            raise

    async def _poll(self, loop: asyncio.AbstractEventLoop, start: float,
                    deadline: Optional[float]) -> Lease:
        """Tries until acquired or the deadline (loop time) passed, sleeping
        on the loop between tries. The tries are one waiter of the core's
        (Client._wait): its claim to be next, its place in a fair queue,
        and the sleep it asks for between tries."""
        left_ms = -1 if deadline is None else max(1, round((deadline - loop.time()) * 1000))
        wait = self._client._wait(self._key, ttl_ms=self._ttl_ms, timeout_ms=left_ms,
                                  min_hold_ms=self._min_hold_ms, auto_renew=self._auto_renew,
                                  on_lost=self._on_lost, on_renew_failed=self._on_renew_failed,
                                  fair=self._fair)
        try:
            return await self._poll_tries(loop, start, deadline, wait.try_)
        finally:
            # Giving the wait up may be a round trip (fair mode): off the loop.
            _executor().submit(wait.close)

    async def _poll_tries(self, loop: asyncio.AbstractEventLoop, start: float,
                          deadline: Optional[float],
                          try_: Callable[[], tuple[Optional[Lease], float]]) -> Lease:
        """Runs try_ (in the pool) until it returns a Lease or the deadline
        passed, sleeping on the loop for the delay each try asks for, or
        until a release in this process wakes the waiters of self._wake."""
        event = asyncio.Event()
        me = (loop, event)
        with _wakers_mu:
            _wakers.setdefault(self._wake, set()).add(me)
        try:
            while True:
                event.clear()  # before the try: a release during it wakes us
                lease, delay = await self._in_pool(loop, try_)
                if lease is not None:
                    return lease
                now = loop.time()
                if deadline is not None and now >= deadline:
                    raise self._timeout_error(now - start)
                if deadline is not None:
                    delay = min(delay, deadline - now)
                timer = loop.call_later(delay, event.set)
                try:
                    await event.wait()
                finally:
                    timer.cancel()
        finally:
            with _wakers_mu:
                waiters = _wakers.get(self._wake)
                if waiters is not None:
                    waiters.discard(me)
                    if not waiters:
                        del _wakers[self._wake]

    async def _acquire_async_ms(self, timeout_ms: int, register: bool,
                                block: bool = False) -> Lease:
        loop = asyncio.get_running_loop()
        if timeout_ms == 0:
            lease = await self._try_async(loop)
            if lease is None:
                raise self._busy_error()
        else:
            start = loop.time()
            deadline = None if timeout_ms < 0 else start + timeout_ms / 1000.0
            where = (loop, self._client, self._wake)
            gate = _gate_use(where)
            try:
                if await gate.enter(loop, deadline):
                    try:
                        lease = await self._poll(loop, start, deadline)
                    finally:
                        gate.leave()
                else:
                    # The time ran out while others of this process waited
                    # before us: one last try of our own.
                    lease_or_none = await self._try_async(loop)
                    if lease_or_none is None:
                        raise self._timeout_error(loop.time() - start)
                    lease = lease_or_none
            finally:
                _gate_done(where, gate)
        if register:
            self._push(lease, block)
        return lease

    async def acquire_async(self, timeout: Optional[Duration] = None) -> Lease:
        """acquire() for asyncio: waits without blocking the event loop and
        without a thread of its own. Cancelling the task stops the wait; an
        acquire that completes after the cancellation is released at once."""
        timeout_ms = _ms(timeout, "timeout", "timeout")
        return await self._reenter_async(False) or \
            await self._acquire_async_ms(timeout_ms, True)

    async def __aenter__(self) -> Lease:
        return await self._reenter_async(True) or await self._acquire_async_ms(-1, True, True)

    async def _reenter_async(self, block: bool) -> Optional[Lease]:
        """With reentrant=True and a lease the task holds through this Lock:
        enters it again (the round trip off the loop) and returns it."""
        mine = self._held_by_me()
        if mine is None:
            return None
        await asyncio.get_running_loop().run_in_executor(_executor(), mine._reenter)
        self._push(mine, block)
        return mine

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        lease = self._pop_block()
        if lease is not None:
            await _AsyncLease(lease, self._wake).__aexit__(et, ev, tb)

    def __repr__(self) -> str:
        state = "not held here"
        if self._mine():
            state = f"held by this {'task' if _current_task() is not None else 'thread'}"
        if self._client.closed:
            state = "client closed"
        return (f"<leaselock.Lock {self._key!r} ttl={self.ttl:g}s"
                f"{f' min_hold={self.min_hold:g}s' if self._min_hold_ms else ''} {state}>")


# ---- semaphores and read-write locks -----------------------------------------
#
# The core does the work (csrc/modes.c, docs/contract.md "Semaphores and
# read-write locks"): each holder holds an ordinary lease on a record of its
# own beside the key (key/.slot/<i>, key/.rw/w, key/.rw/r/<token>), which
# is what its Lease names. Here: the objects, their checks, and the asyncio
# wait, which polls with one-try acquires (the core has no wait driven one
# try at a time for several records).

_Mode = Literal["semaphore", "shared", "exclusive"]
_SEMAPHORE_MAX = 1000
# The longest suffix each adds to the key for its records (leaselock.h).
_SEMAPHORE_SUFFIX = len("/.slot/999")
_RWLOCK_SUFFIX = len("/.rw/r/") + 32
_KEY_MAX = 255


def _mode_key(key: str, suffix: int, what: str) -> None:
    n = len(key.encode())
    if n + suffix > _KEY_MAX:
        raise _error(ValueError, f"key is {n} bytes: a {what} adds up to {suffix} bytes to it "
                     f"for its records, so it may have at most {_KEY_MAX - suffix}")


def _live(client: _leaselock.Client, prefix: str, name_ok: Callable[[str], bool]) -> int:
    """The live records (by the database's clock) under prefix whose rest
    name_ok accepts."""
    return sum(1 for t in client._list(prefix) if t[3] > 0 and name_ok(t[0][len(prefix):]))


def _slot_name(rest: str) -> bool:
    # As the core counts them: a plain decimal below the maximum, so that
    # another lock's records under the prefix are not counted.
    return rest.isascii() and rest.isdigit() and len(rest) <= 3 and (
        rest == "0" or rest[0] != "0")


def _reader_name(rest: str) -> bool:
    return len(rest) == 32 and all(c in "0123456789abcdef" for c in rest)


def _backoff(attempt: int) -> float:
    """The core's waiter backoff (seconds): full jitter, uniform in 1 ms ..
    min(1 s, 5 ms * 2^attempt)."""
    return random.uniform(0.001, min(1.0, 0.005 * 2 ** min(attempt, 10)))


class _ModeLock(Lock):
    """What a semaphore and the sides of a read-write lock share: Lock's
    API over the core's mode acquires. Not reentrant (no reentrant
    argument): each acquire is a holder of its own."""

    __slots__ = ("_mode", "_limit")

    def __init__(self, client: _leaselock.Client, key: str, mode: _Mode, limit: int,
                 suffix: int, what: str, *, ttl: Duration, min_hold: Duration,
                 auto_renew: bool, on_lost: Optional[Callable[[Lease], object]],
                 on_renew_failed: Optional[Callable[[Lease, LockError, float], object]],
                 fair: bool) -> None:
        super().__init__(client, key, ttl=ttl, min_hold=min_hold, auto_renew=auto_renew,
                         on_lost=on_lost, on_renew_failed=on_renew_failed, fair=fair)
        _mode_key(self._key, suffix, what)
        self._mode = mode
        self._limit = limit
        # NUL is in no key: a lock named so is not woken nor queued with it.
        self._wake = f"{self._key}\0{what}"

    def _acquire_ms(self, timeout_ms: int, cancel: Any) -> Optional[Lease]:
        return self._client._acquire_mode(
            self._key, mode=self._mode, limit=self._limit, ttl_ms=self._ttl_ms,
            timeout_ms=timeout_ms, min_hold_ms=self._min_hold_ms, auto_renew=self._auto_renew,
            on_lost=self._on_lost, cancel=cancel, on_renew_failed=self._on_renew_failed,
            fair=self._fair)

    def _check_not_mine(self) -> None:
        pass  # several holds of one thread are several holders

    async def _poll(self, loop: asyncio.AbstractEventLoop, start: float,
                    deadline: Optional[float]) -> Lease:
        """One-try acquires in the pool, with the core's backoff between
        them, or woken by a release of this process."""
        attempt = 0

        def try_() -> tuple[Optional[Lease], float]:
            nonlocal attempt
            lease = self._acquire_ms(0, None)
            attempt += 1
            return lease, _backoff(attempt - 1)

        return await self._poll_tries(loop, start, deadline, try_)

    def _held_here(self) -> int:
        return sum(1 for lease, _ in self._stack() or () if lease.held)

    def _repr_state(self) -> str:
        if self._client.closed:
            return "client closed"
        n = self._held_here()
        if n == 0:
            return "not held here"
        who = "task" if _current_task() is not None else "thread"
        return f"held by this {who}" + (f" ({n} holds)" if n > 1 else "")


class Semaphore(_ModeLock):
    """A counting semaphore across processes and machines: at most limit
    holders at once, each with a lease of its own (owner, fence, renewal,
    loss detection, min_hold) on a slot beside the key; lease.key names
    that slot's record (key + "/.slot/<i>") and lease.fence grows per slot.
    Used like a Lock: `with sem:`, `sem.acquire(timeout=...)`,
    `sem.try_acquire()`, `sem.release()`, `async with sem:`.

    Each acquire is a new holder, also from a thread that holds already
    (as threading.Semaphore counts): there is no reentrant option.
    release() releases what the calling thread (or task) took last
    through this object; release a Lease itself to let it go from
    elsewhere. A limit lowered while holders started under a higher one
    are live (a Semaphore with a lower limit on the same key) lets no new
    holder in until fewer than the new limit are live. fair=True: fair
    waiters get slots in order of arrival among themselves (a waiter that
    is not fair may still take a slot that frees first).
    """

    __slots__ = ()
    _NOUN = "Semaphore"

    def __init__(self, client: _leaselock.Client, key: str, limit: int, *,
                 ttl: Duration = 30.0, min_hold: Duration = 0.0, auto_renew: bool = True,
                 on_lost: Optional[Callable[[Lease], object]] = None,
                 on_renew_failed: Optional[Callable[[Lease, LockError, float], object]] = None,
                 fair: bool = False) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise _error(TypeError, f"limit must be an int, not {type(limit).__name__}")
        if not 1 <= limit <= _SEMAPHORE_MAX:
            raise _error(ValueError, f"limit must be 1 to {_SEMAPHORE_MAX} (got {limit})")
        super().__init__(client, key, "semaphore", limit, _SEMAPHORE_SUFFIX, "semaphore",
                         ttl=ttl, min_hold=min_hold, auto_renew=auto_renew, on_lost=on_lost,
                         on_renew_failed=on_renew_failed, fair=fair)

    @property
    def limit(self) -> int:
        """At most this many holders at once."""
        return self._limit

    def available(self) -> int:
        """How many more holders could start now (by the database's clock;
        0 when full): limit minus the live slots, a released one still
        inside its min_hold counted. A snapshot: others may take or free
        slots at any time."""
        return max(0, self._limit - _live(self._client, f"{self._key}/.slot/", _slot_name))

    def locked(self) -> bool:
        """True when no slot is free now (an acquire would wait)."""
        return self.available() == 0

    def _busy_error(self) -> LockTimeout:
        return _error(LockTimeout, f'semaphore "{self._key}": no free slot (the limit is '
                      f'{self._limit})', "BUSY")

    def _timeout_error(self, waited: float) -> LockTimeout:
        return _error(LockTimeout, f"timed out after {round(waited * 1000)} ms waiting for a "
                      f'slot of the semaphore "{self._key}"', "TIMEOUT")

    def __repr__(self) -> str:
        return (f"<leaselock.Semaphore {self._key!r} limit={self._limit} ttl={self.ttl:g}s"
                f"{f' min_hold={self.min_hold:g}s' if self._min_hold_ms else ''} "
                f"{self._repr_state()}>")


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
    task) that holds the exclusive side through this RWLock and asks for
    either side again, or holds the shared side and asks for the exclusive
    one, gets RuntimeError instead of waiting for itself: there is no
    upgrade or downgrade; release first.
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
        who = "task" if _current_task() is not None else "thread"
        if rw._exclusive._mine():
            raise _error(RuntimeError, f'"{self._key}" is held exclusively by this {who} '
                         "through this read-write lock: it would wait for itself "
                         "(read-write locks are not reentrant)")
        if self._mode == "exclusive" and rw._shared._mine():
            raise _error(RuntimeError, f'"{self._key}" is held shared by this {who} through '
                         "this read-write lock: an exclusive acquire would wait for itself "
                         "(release the shared hold first)")

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

    def _timeout_error(self, waited: float) -> LockTimeout:
        return _error(LockTimeout, f"timed out after {round(waited * 1000)} ms waiting for the "
                      f'{self._mode} side of the read-write lock "{self._key}"', "TIMEOUT")

    def __repr__(self) -> str:
        return (f"<leaselock.RWLockSide {self._key!r} {self._mode} ttl={self.ttl:g}s"
                f"{f' min_hold={self.min_hold:g}s' if self._min_hold_ms else ''} "
                f"{self._repr_state()}>")


class RWLock:
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

    @property
    def key(self) -> str:
        return self._key

    @property
    def client(self) -> _leaselock.Client:
        return self._client

    def __repr__(self) -> str:
        held = [s._mode for s in (self._shared, self._exclusive) if s._mine()]
        state = f"held {held[0]} here" if held else "not held here"
        if self._client.closed:
            state = "client closed"
        return f"<leaselock.RWLock {self._key!r} ttl={self._shared.ttl:g}s {state}>"


class _AsyncLease:
    """Releases a lease from the pool, so the event loop never waits on the
    database."""

    __slots__ = ("lease", "wake")

    def __init__(self, lease: Lease, wake: Optional[str] = None) -> None:
        self.lease = lease
        self.wake = lease.key if wake is None else wake

    async def __aenter__(self) -> Lease:
        return self.lease

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(_executor(), self.lease.__exit__, et, ev, tb)
        finally:
            _notify(self.wake)


def _release_quietly(lease: Lease, wake: Optional[str] = None) -> None:
    try:
        if lease.held:
            lease.release()
    except (LockError, ValueError):
        pass
    finally:
        _notify(lease.key if wake is None else wake)


def _after_fork_child() -> None:
    # The child holds none of its parent's leases (the core refuses to act
    # on them there): forget which threads held what. The pool's threads
    # and the parent's event loops are not in the child.
    global _pool, _pool_mu, _wakers_mu, _gates_mu
    for lock in list(_locks):
        lock._threads = threading.local()
        lock._tasks = weakref.WeakKeyDictionary()
    _pool = None
    _pool_mu, _wakers_mu, _gates_mu = threading.Lock(), threading.Lock(), threading.Lock()
    _wakers.clear()
    _gates.clear()


def _at_exit() -> None:
    # Release what is still held, then keep the renewal threads away from
    # the interpreter as it shuts down.
    for client in list(_clients):
        try:
            client.close()
        except Exception:
            pass
    _leaselock._shutdown()


os.register_at_fork(after_in_child=_after_fork_child)
atexit.register(_at_exit)
