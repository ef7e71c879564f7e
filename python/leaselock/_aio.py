"""The asyncio machinery of the package: the wait without a thread per
waiter, and releases off the event loop. Lock's asyncio methods
(acquire_async, async with) and client.locked() on coroutine functions
use it.

A child process does not have the pool's threads nor its parent's event
loops: _fork.py gives it a new pool, new mutexes and no waiters. Code
here reads _pool, _pool_mu, _wakers_mu and _gates_mu as this module's
globals at each use (never a copy of them) for that reason.

asyncio and concurrent.futures (which imports logging) are imported by
the code that runs on an event loop, when it first runs, not by `import
leaselock`: together they would be most of its start-up. A program that
never imported asyncio runs no event loop, so it has no task (_current_task).
"""
from __future__ import annotations

import sys
import threading
from collections import deque

from ._leaselock import Lease, LockError, _aio_wakers

TYPE_CHECKING = False  # typing's, without importing typing (_args.py says why)
if TYPE_CHECKING:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor
    from typing import Any, Callable, Optional

_modules = sys.modules


def _current_task() -> Optional["asyncio.Task[Any]"]:
    """The asyncio task running on this thread, if any."""
    aio = _modules.get("asyncio")
    if aio is None:  # never imported: no event loop runs
        return None
    loop = aio._get_running_loop()
    task: Optional[asyncio.Task[Any]] = None if loop is None else aio.current_task(loop)
    return task


def _who() -> str:
    """What holds a lease in the calling context: "task" in an asyncio
    task, else "thread"."""
    return "task" if _current_task() is not None else "thread"


def _running_loop() -> asyncio.AbstractEventLoop:
    """asyncio.get_running_loop(), for the code that runs on one."""
    import asyncio

    return asyncio.get_running_loop()


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
        from concurrent.futures import ThreadPoolExecutor

        with _pool_mu:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=_POOL_THREADS,
                                           thread_name_prefix="leaselock-async")
            pool = _pool
    return pool


# key -> the (loop, event) of each task polling for that key.
_wakers: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
# A thread's `with lock:` exit (the extension's, with.c) reads it directly:
# the same dict for the life of the process (a fork clears it, in place).
_aio_wakers(_wakers)
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


def _waiting(wake: str, me: tuple[asyncio.AbstractEventLoop, asyncio.Event], on: bool) -> None:
    """Adds (on) or removes the (loop, event) of a task polling for wake."""
    with _wakers_mu:
        if on:
            _wakers.setdefault(wake, set()).add(me)
            return
        waiters = _wakers.get(wake)
        if waiters is not None:
            waiters.discard(me)
            if not waiters:
                del _wakers[wake]


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
        import asyncio

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
    import asyncio

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


async def _in_pool(loop: asyncio.AbstractEventLoop,
                   call: Callable[[], tuple[Optional[Lease], float]],
                   wake: str) -> tuple[Optional[Lease], float]:
    """call() (a try: the Lease or None, and the time to sleep before the
    next) in the pool. A lease that arrives after the caller was cancelled
    is released (waking the waiters of wake)."""
    import asyncio

    fut: asyncio.Future[tuple[Optional[Lease], float]] = loop.create_future()

    def deliver(lease: Optional[Lease], sleep: float,
                exc: Optional[BaseException]) -> None:
        if fut.cancelled():
            # The task gave up while the try went on: never leak it.
            if lease is not None:
                _executor().submit(_release_quietly, lease, wake)
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
                _release_quietly(lease, wake)

    _executor().submit(work)
    try:
        return await fut
    except asyncio.CancelledError:
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            # The lease was delivered, then the task was cancelled before
            # it resumed: release it (off the event loop) before the
            # cancellation goes on, whatever else cancels us.
            lease = fut.result()[0]
            if lease is not None:
                await _release_off_loop(lease, wake)
        raise


async def _poll_tries(loop: asyncio.AbstractEventLoop, deadline: Optional[float],
                      try_: Callable[[], tuple[Optional[Lease], float]],
                      wake: str) -> Optional[Lease]:
    """Runs try_ (in the pool) until it returns a Lease, or None once the
    deadline (loop time) passed, sleeping on the loop for the delay each
    try asks for, or until a release in this process wakes the waiters of
    wake."""
    import asyncio

    event = asyncio.Event()
    me = (loop, event)
    _waiting(wake, me, True)
    try:
        while True:
            event.clear()  # before the try: a release during it wakes us
            lease, delay = await _in_pool(loop, try_, wake)
            if lease is not None:
                return lease
            now = loop.time()
            if deadline is not None and now >= deadline:
                return None
            if deadline is not None:
                delay = min(delay, deadline - now)
            timer = loop.call_later(delay, event.set)
            try:
                await event.wait()
            finally:
                timer.cancel()
    finally:
        _waiting(wake, me, False)

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
        loop = _running_loop()
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
