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

The leases, their renewal, expiry and fencing are the C core's (the
leaselock._leaselock extension); this module adds the Python conveniences:
Lock objects, context managers, the decorator and asyncio.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import os
import threading
import weakref
from collections import namedtuple
from typing import Any, Callable, Optional

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

__all__ = [
    "connect",
    "Client",
    "Lock",
    "Lease",
    "Holder",
    "LockError",
    "LockTimeout",
    "NotHeld",
    "LockLost",
    "BackendError",
    "default_uri",
]
__version__ = _leaselock.__version__

#: Who holds (or last held) a lease: for inspection only.
Holder = namedtuple("Holder", "host pid label")

_check_key = _leaselock._check_key
_get_running_loop = asyncio._get_running_loop
_seconds = _leaselock._seconds

# Every open client and every Lock, so exit can release and a forked
# child can forget what its parent's threads held.
_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()
_locks: "weakref.WeakSet[Lock]" = weakref.WeakSet()


def connect(uri: Optional[str] = None, **options: Any) -> "Client":
    """Opens a client. uri None: $LEASELOCK_URI, else the embedded SQLite
    default (see default_uri()). options: label (str) stored with every
    lease as holder info."""
    return Client(uri, **options)


def _error(cls: type, message: str, code: str = "INVALID") -> Exception:
    """cls(message) carrying code (INVALID: as the extension raises for bad
    arguments and use after close)."""
    e = cls(message)
    e.code = code
    return e


def _record(t: tuple) -> dict:
    key, owner, fence, expires_ms, host, pid, label = t
    return {
        "key": key,
        "owner": owner,
        "fence": fence,
        "expires_in": expires_ms / 1000.0,
        "holder": Holder(host, pid, label),
    }


class Client(_leaselock.Client):
    """A connection to one lock database. Thread-safe; a context manager
    that closes it. close() releases the leases still held through it;
    a client that is garbage collected without close() releases nothing
    (its Lease objects release their own leases when they go)."""

    def __init__(self, uri: Optional[str] = None, *, label: Optional[str] = None) -> None:
        super().__init__(uri, label=label)
        _clients.add(self)

    def lock(
        self,
        key: str,
        *,
        ttl: float = 30.0,
        min_hold: float = 0.0,
        auto_renew: bool = True,
        on_lost: Optional[Callable[[Lease], Any]] = None,
        on_renew_failed: Optional[Callable[[Lease, LockError, float], Any]] = None,
    ) -> "Lock":
        """A Lock on key. Nothing is acquired yet. on_lost(lease) is called
        from the renewal thread when a lease is lost; it needs
        auto_renew=True (ValueError otherwise). on_renew_failed(lease,
        error, seconds_left) is called from the renewal thread when an
        automatic renewal failed but the lease is not lost yet (it is
        retried)."""
        return Lock(self, key, ttl=ttl, min_hold=min_hold, auto_renew=auto_renew, on_lost=on_lost,
                    on_renew_failed=on_renew_failed)

    def locked(
        self,
        key: str,
        *,
        ttl: float = 30.0,
        timeout: Optional[float] = 0,
        min_hold: float = 0.0,
        raise_on_busy: bool = False,
    ) -> Callable:
        """Decorator: runs the function under the lock. When the lock stays
        busy for timeout seconds (0: one try) the call is skipped and
        returns None, or raises LockTimeout with raise_on_busy=True.
        Works on coroutine functions too."""
        lock = self.lock(key, ttl=ttl, min_hold=min_hold)
        timeout_ms = _seconds(timeout, "timeout", "timeout")
        if not isinstance(raise_on_busy, bool):
            raise _error(TypeError,
                           f"raise_on_busy must be a bool, not {type(raise_on_busy).__name__}")

        def decorate(fn: Callable) -> Callable:
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
                lease = lock._acquire_ms(timeout_ms, None)
                if lease is None:
                    if raise_on_busy:
                        raise lock._busy_error(timeout_ms)
                    return None
                with lease:
                    return fn(*args, **kwargs)

            return wrapper

        return decorate

    def info(self, key: str) -> Optional[dict]:
        """The record of key as the database holds it, or None: key, owner
        (None once released), fence, expires_in (seconds by the database's
        clock, <= 0 when expired) and holder (host, pid, label)."""
        t = self._inspect(key)
        return None if t is None else _record(t)

    def locks(self, prefix: str = "") -> list:
        """The records whose key starts with prefix, in key order."""
        return [_record(t) for t in self._list(prefix)]

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<leaselock.Client {self.uri} ({self.backend}) {state}>"


def _current_task() -> Optional["asyncio.Task"]:
    """The asyncio task running on this thread, if any."""
    loop = _get_running_loop()
    return None if loop is None else asyncio.current_task(loop)


class Lock:
    """A named lock on a client, like threading.Lock across processes and
    machines: `with lock:`, `lock.acquire(timeout=...)` (returns the Lease),
    `lock.release()`, `async with lock:`.

    Not reentrant: a thread (or asyncio task) that holds it through this
    Lock object and asks again gets RuntimeError instead of waiting for
    itself. Several threads may share one Lock object; each waits its turn.

    on_lost(lease) is called from the renewal thread when a lease taken
    through this Lock is lost; it needs auto_renew=True, so passing it with
    auto_renew=False raises ValueError.
    """

    __slots__ = ("_client", "_key", "_ttl_ms", "_min_hold_ms", "_auto_renew", "_on_lost",
                 "_on_renew_failed", "_threads", "_tasks", "__weakref__")

    def __init__(self, client: Client, key: str, *, ttl: float = 30.0, min_hold: float = 0.0,
                 auto_renew: bool = True, on_lost: Optional[Callable] = None,
                 on_renew_failed: Optional[Callable] = None) -> None:
        if not isinstance(client, _leaselock.Client):
            raise _error(TypeError,
                           f"client must be a leaselock.Client, not {type(client).__name__}")
        self._key = _check_key(key, "key")
        self._ttl_ms = _seconds(ttl, "ttl", "ttl")
        self._min_hold_ms = _seconds(min_hold, "min_hold", "duration")
        if not isinstance(auto_renew, bool):
            raise _error(TypeError, f"auto_renew must be a bool, not {type(auto_renew).__name__}")
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
        self._on_lost = on_lost
        self._on_renew_failed = on_renew_failed
        # What each thread, and each asyncio task, took through this Lock:
        # [(lease, taken by a with-block on this Lock)], oldest first. Kept
        # per thread in thread-local storage and per task in a weak-keyed
        # mapping, not by thread or task id: both are reused once their
        # thread or task is gone.
        self._threads = threading.local()
        self._tasks: "weakref.WeakKeyDictionary[asyncio.Task, list]" = weakref.WeakKeyDictionary()
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
    def client(self) -> Client:
        return self._client

    # -- core calls --------------------------------------------------------
    def _acquire_ms(self, timeout_ms: int, cancel: Any) -> Optional[Lease]:
        return self._client._acquire(self._key, ttl_ms=self._ttl_ms, timeout_ms=timeout_ms,
                                     min_hold_ms=self._min_hold_ms, auto_renew=self._auto_renew,
                                     on_lost=self._on_lost, cancel=cancel,
                                     on_renew_failed=self._on_renew_failed)

    def _busy_error(self, timeout_ms: int) -> LockTimeout:
        return _error(LockTimeout, f'"{self._key}" is held by another owner', "BUSY")

    def _stack(self, create: bool = False) -> Optional[list]:
        """The leases of the calling task (else thread) through this Lock."""
        task = _current_task()
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
        return bool(stack) and any(lease.held for lease, _ in stack)

    def _check_not_mine(self) -> None:
        if self._mine():
            who = "task" if _current_task() is not None else "thread"
            raise _error(RuntimeError,
                           f'"{self._key}" is already held by this {who} through this Lock; '
                           "leaselock locks are not reentrant")

    def _push(self, lease: Lease, block: bool) -> None:
        """Records a lease the caller took; block: by entering a with-block
        on the Lock, whose exit reports and releases that one lease."""
        stack = self._stack(True)
        if stack:
            # Forget the leases released meanwhile (lease.release(), a
            # with-block on the lease): neither held nor lost.
            stack[:] = [e for e in stack if e[0].held or e[0].lost]
        stack.append((lease, block))

    def _take(self, timeout_ms: int, block: bool) -> Lease:
        self._check_not_mine()
        lease = self._acquire_ms(timeout_ms, None)
        if lease is None:
            raise self._busy_error(timeout_ms)
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
    def acquire(self, timeout: Optional[float] = None) -> Lease:
        """Blocks until acquired (timeout None: forever; 0: one try) and
        returns the Lease (a context manager). Raises LockTimeout when the
        time runs out. Ctrl-C stops the wait."""
        return self._take(_seconds(timeout, "timeout", "timeout"), False)

    def try_acquire(self) -> Optional[Lease]:
        """One try: the Lease, or None when another owner holds the key."""
        self._check_not_mine()
        lease = self._acquire_ms(0, None)
        if lease is not None:
            self._push(lease, False)
        return lease

    def release(self) -> None:
        """Releases the lease this thread (or task) took last through this
        Lock. Raises NotHeld when it holds none, or no longer holds it."""
        stack = self._stack()
        if not stack:
            raise _error(NotHeld, f'"{self._key}" is not held by this thread through this Lock',
                         "NOT_HELD")
        stack.pop()[0].release()

    def locked(self) -> bool:
        """True when some owner holds the key now (by the database's clock),
        including a released lease still inside its min_hold."""
        rec = self._client.info(self._key)
        return rec is not None and rec["expires_in"] > 0

    def __enter__(self) -> Lease:
        return self._take(-1, True)

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        lease = self._pop_block()
        if lease is not None:
            lease.__exit__(et, ev, tb)

    # -- asyncio -------------------------------------------------------------
    async def _acquire_async_ms(self, timeout_ms: int, register: bool,
                                block: bool = False) -> Lease:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        cancel = threading.Event()

        def deliver(lease: Optional[Lease], exc: Optional[BaseException]) -> None:
            if fut.cancelled():
                # The task gave up while the acquire went on: never leak it.
                if lease is not None:
                    loop.run_in_executor(None, _release_quietly, lease)
                return
            if exc is not None:
                fut.set_exception(exc)
            elif lease is None:
                fut.set_exception(self._busy_error(timeout_ms))
            else:
                fut.set_result(lease)

        def work() -> None:
            lease, exc = None, None
            try:
                lease = self._acquire_ms(timeout_ms, cancel)
            except BaseException as e:  # delivered to the awaiting task
                exc = e
            try:
                loop.call_soon_threadsafe(deliver, lease, exc)
            except RuntimeError:  # the loop is closed
                if lease is not None:
                    _release_quietly(lease)

        threading.Thread(target=work, name=f"leaselock-acquire {self._key}", daemon=True).start()
        try:
            lease = await fut
        except asyncio.CancelledError:
            cancel.set()
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                # The lease was delivered, then the task was cancelled
                # before it resumed: release it (off the event loop) before
                # the cancellation goes on, whatever else cancels us.
                lease = fut.result()
                try:
                    done = loop.run_in_executor(None, _release_quietly, lease)
                except RuntimeError:  # the executor is shut down
                    _release_quietly(lease)
                else:
                    try:
                        await asyncio.shield(done)
                    except asyncio.CancelledError:
                        pass
            raise
        if register:
            self._push(lease, block)
        return lease

    async def acquire_async(self, timeout: Optional[float] = None) -> Lease:
        """acquire() for asyncio: waits without blocking the event loop.
        Cancelling the task stops the wait; an acquire that completes after
        the cancellation is released at once."""
        timeout_ms = _seconds(timeout, "timeout", "timeout")
        self._check_not_mine()
        return await self._acquire_async_ms(timeout_ms, True)

    async def __aenter__(self) -> Lease:
        self._check_not_mine()
        return await self._acquire_async_ms(-1, True, True)

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        lease = self._pop_block()
        if lease is not None:
            await _AsyncLease(lease).__aexit__(et, ev, tb)

    def __repr__(self) -> str:
        state = "not held here"
        if self._mine():
            state = f"held by this {'task' if _current_task() is not None else 'thread'}"
        if self._client.closed:
            state = "client closed"
        return (f"<leaselock.Lock {self._key!r} ttl={self.ttl:g}s"
                f"{f' min_hold={self.min_hold:g}s' if self._min_hold_ms else ''} {state}>")


class _AsyncLease:
    """Releases a lease from a worker thread, so the event loop never waits
    on the database."""

    __slots__ = ("lease",)

    def __init__(self, lease: Lease) -> None:
        self.lease = lease

    async def __aenter__(self) -> Lease:
        return self.lease

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.lease.__exit__, et, ev, tb)


def _release_quietly(lease: Lease) -> None:
    try:
        if lease.held:
            lease.release()
    except (LockError, ValueError):
        pass


def _after_fork_child() -> None:
    # The child holds none of its parent's leases (the core refuses to act
    # on them there): forget which threads held what.
    for lock in list(_locks):
        lock._threads = threading.local()
        lock._tasks = weakref.WeakKeyDictionary()


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
import atexit  # noqa: E402

atexit.register(_at_exit)
