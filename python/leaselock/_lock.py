"""Lock: a named lock on a client, like threading.Lock across processes
and machines; the base of Semaphore and RWLockSide (_modes.py). Its asyncio
methods wait through _aio.py."""
from __future__ import annotations

import threading
import weakref

from . import _leaselock
from ._aio import (
    _AsyncLease,
    _current_task,
    _executor,
    _gate_done,
    _gate_use,
    _in_pool,
    _notify,
    _poll_tries,
    _running_loop,
    _who,
)
from ._args import _check_key, _error, _ms
from ._leaselock import Lease, LockError, LockTimeout, NotHeld

TYPE_CHECKING = False  # typing's, without importing typing (_args.py says why)
if TYPE_CHECKING:
    import asyncio
    from typing import Any, Callable, Optional

    from ._args import Duration

# Every Lock, so that a forked child can forget what its parent's threads
# held (_fork.py).
_locks: "weakref.WeakSet[Lock]" = weakref.WeakSet()


# What each holder took through the lock objects of any client, by the
# name of their records (a Lock's _wake), so that a holder that asks again
# through another object of the client gets the self-wait error, as through
# one object (a lock object may be gone while its lease is held, so the
# leases are noted here, not with their objects). A holder is a thread
# (its registry kept by the extension with the thread's state, as
# threading.local keeps its values: _leaselock._thread_holds()) or an
# asyncio task (in _task_holds, weakly keyed): a gone thread or task holds
# nothing. The registry is a dict the extension keeps (_holds_note,
# _holds_find: with.c): {name: [(weakref to the Lease, mode)]}, weak: a
# dropped Lease is released.
_task_holds: "weakref.WeakKeyDictionary[asyncio.Task[Any], dict[Any, Any]]" = \
    weakref.WeakKeyDictionary()


def _note_hold(client: _leaselock.Client, name: str, lease: Lease, mode: str) -> None:
    """Records that the caller holds lease on the records name."""
    task = _current_task()
    if task is not None:
        reg = _task_holds.get(task)
        if reg is None:
            reg = _task_holds[task] = {}
    else:
        reg = _leaselock._thread_holds()
    _leaselock._holds_note(reg, name, lease, mode)


def _my_holds(client: _leaselock.Client, name: str) -> list[tuple[Lease, str]]:
    """The leases (and modes) the caller holds on the records name through
    any lock object of client, innermost first. An asyncio task also holds
    what its thread took outside any task: that code runs again only once
    the loop returns, so the task would wait for itself."""
    task = _current_task()
    mine: list[tuple[Lease, str]] = []
    if task is not None:
        reg = _task_holds.get(task)
        if reg is not None:
            mine = _leaselock._holds_find(reg, client, name)
    return mine + _leaselock._holds_find(_leaselock._thread_holds(), client, name)


class _Named:
    """The key and client of a lock object (Lock, RWLock)."""

    __slots__ = ()
    _key: str
    _client: _leaselock.Client

    @property
    def key(self) -> str:
        """The lock's name (its key in the database)."""
        return self._key

    @property
    def client(self) -> _leaselock.Client:
        """The client it acquires through."""
        return self._client


class Lock(_Named, _leaselock._LockBase):
    """A named lock on a client, like threading.Lock across processes and
    machines: `with lock:`, `lock.acquire(timeout=...)` (returns the Lease),
    `lock.release()`, `async with lock:`.

    Not reentrant unless reentrant=True: a thread (or asyncio task) that
    holds the key through this Lock object, or another Lock of the same
    client, and asks again gets RuntimeError instead of waiting for itself
    (a task also holds what its thread took outside any task). With
    reentrant=True it enters again: the same Lease (and fence), one more
    hold counted in the record, and each release (or with-block exit) lets
    one hold go, the last the key.
    Several threads may share one Lock object; each waits its turn.

    on_lost(lease) is called from the renewal thread when a lease taken
    through this Lock is lost; it needs auto_renew=True, so passing it with
    auto_renew=False raises ValueError.
    """

    # _client, _key, _wake, _ttl_ms, _min_hold_ms, _auto_renew, _on_lost,
    # _on_renew_failed, _fair, _reentrant and _threads are _LockBase's
    # fields (with.c), which its with-block reads directly.
    __slots__ = ("_tasks", "__weakref__")

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
    def ttl(self) -> float:
        """The lease duration of each acquire, in seconds."""
        return self._ttl_ms / 1000.0

    @property
    def min_hold(self) -> float:
        """Seconds a released key stays taken after its acquire (0: none)."""
        return self._min_hold_ms / 1000.0

    @property
    def fair(self) -> bool:
        """True when waiters get the key in order of arrival."""
        return self._fair

    @property
    def reentrant(self) -> bool:
        """True when the holder (thread or asyncio task) may enter again."""
        return self._reentrant

    # -- core calls --------------------------------------------------------
    def _acquire_ms(self, timeout_ms: int, cancel: Any,
                    busy_raises: bool = False) -> Optional[Lease]:
        """The core's acquire: None for a busy one try, unless busy_raises
        (then the core's LockTimeout, code BUSY, naming the holder)."""
        return self._client._acquire(self._key, ttl_ms=self._ttl_ms, timeout_ms=timeout_ms,
                                     min_hold_ms=self._min_hold_ms, auto_renew=self._auto_renew,
                                     on_lost=self._on_lost, cancel=cancel,
                                     on_renew_failed=self._on_renew_failed, fair=self._fair,
                                     busy_raises=busy_raises)

    async def _timeout_async(self, loop: asyncio.AbstractEventLoop, start: float) -> LockTimeout:
        """An asyncio wait's timeout, naming the key's holder as the core's
        acquires do (one read, in the pool); a mode's names none."""
        waited = loop.time() - start
        e = self._timeout_error(waited)
        if isinstance(self, _modes_base()):
            return e
        try:
            explained: LockTimeout = await loop.run_in_executor(
                _executor(), self._client._explain, self._key, True, round(waited * 1000), str(e))
        except (LockError, ValueError):
            return e  # the read failed, or the client was closed: no holder named
        return explained

    def _busy_error(self) -> LockTimeout:
        return _error(LockTimeout, f'"{self._key}" is held by another owner', "BUSY")

    def _timeout_error(self, waited: float) -> LockTimeout:
        return _error(LockTimeout, f"timed out after {round(waited * 1000)} ms waiting for "
                      f"{self._waited_for()}", "TIMEOUT")

    def _waited_for(self) -> str:
        """What the timeout's message says it waited for."""
        return f'"{self._key}" (held by another owner)'

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
        mine = _my_holds(self._client, self._wake)
        if self._mine() or mine:
            ours = [lease for lease, _ in (self._stack() or []) +
                    (getattr(self._threads, "stack", None) or [])]
            through = "this Lock" if self._mine() or any(
                lease is m for m, _ in mine for lease in ours) else "another Lock of this client"
            raise _error(RuntimeError,
                         f'"{self._key}" is already held by this {_who()} through {through}; '
                         "pass reentrant=True to enter it again")

    def _held_by_me(self) -> Optional[Lease]:
        """With reentrant=True, the lease the caller holds on the key through
        this Lock, else through another Lock of its client (the innermost);
        None when it holds none (or may not re-enter)."""
        if not self._reentrant:
            self._check_not_mine()
            return None
        for lease, _ in reversed(self._stack() or ()):
            if lease.held:
                return lease
        mine = _my_holds(self._client, self._wake)
        return mine[0][0] if mine else None

    def _push(self, lease: Lease, block: bool) -> None:
        """Records a lease the caller took; block: by entering a with-block
        on the Lock, whose exit reports and releases that one lease."""
        _note_hold(self._client, self._wake, lease, getattr(self, "_mode", "lock"))
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
        lease = self._acquire_ms(timeout_ms, None, True)
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

    # __enter__ and __exit__ are _LockBase's (the extension's, with.c): the
    # steps of _take(-1, True) and _exit_py in C for a thread's plain Lock,
    # so that `with lock:` runs no Python code of the package; an asyncio
    # task, re-entry and a self-wait take _take and _exit_py.

    def _exit_py(self, et: Any, ev: Any, tb: Any) -> None:
        """__exit__ in an event loop's thread: the task's, else the thread's."""
        lease = self._pop_block()
        if lease is not None:
            try:
                lease.__exit__(et, ev, tb)
            finally:
                _notify(self._wake)

    # -- asyncio -------------------------------------------------------------
    async def _try_async(self, loop: asyncio.AbstractEventLoop,
                         busy_raises: bool = False) -> Optional[Lease]:
        """One try (timeout 0) in the pool: the Lease, or None when busy
        (busy_raises: the core's LockTimeout naming the holder)."""
        lease, _ = await _in_pool(loop, lambda: (self._acquire_ms(0, None, busy_raises), 0.0),
                                  self._wake)
        return lease

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
        """Runs try_ (in the pool) until it returns a Lease, or raises the
        timeout once the deadline passed (_aio._poll_tries)."""
        lease = await _poll_tries(loop, deadline, try_, self._wake)
        if lease is None:
            raise await self._timeout_async(loop, start)
        return lease

    async def _acquire_async_ms(self, timeout_ms: int, register: bool,
                                block: bool = False) -> Lease:
        loop = _running_loop()
        if timeout_ms == 0:
            lease = await self._try_async(loop, True)
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
                        raise await self._timeout_async(loop, start)
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
        await _running_loop().run_in_executor(_executor(), mine._reenter)
        self._push(mine, block)
        return mine

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        lease = self._pop_block()
        if lease is not None:
            await _AsyncLease(lease, self._wake).__aexit__(et, ev, tb)

    def __repr__(self) -> str:
        return (f"<leaselock.{self._repr_name()} ttl={self.ttl:g}s"
                f"{f' min_hold={self.min_hold:g}s' if self._min_hold_ms else ''} "
                f"{self._repr_state()}>")

    def _repr_name(self) -> str:
        return f"Lock {self._key!r}"

    def _repr_state(self) -> str:
        if self._client.closed:
            return "client closed"
        return f"held by this {_who()}" if self._mine() else "not held here"


def _modes_base() -> type:
    """_modes._ModeLock (imported late: it subclasses Lock)."""
    from ._modes import _ModeLock
    return _ModeLock
