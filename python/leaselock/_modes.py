"""What a semaphore and the sides of a read-write lock share: Lock's API
over the core's mode acquires (_ModeLock), the checks of their keys, and
the count of live holders."""
from __future__ import annotations

from . import _leaselock
from ._aio import _who
from ._args import _error
from ._leaselock import Lease, LockError
from ._lock import Lock

TYPE_CHECKING = False  # typing's, without importing typing (_args.py says why)
if TYPE_CHECKING:
    import asyncio
    from typing import Any, Callable, Literal, Optional

    from ._args import Duration

    _Mode = Literal["semaphore", "shared", "exclusive"]

# The core does the work (csrc/modes.c, docs/contract.md "Semaphores and
# read-write locks"): each holder holds an ordinary lease on a record of its
# own beside the key (key/.slot/<i>, key/.rw/w, key/.rw/r/<token>), which
# is what its Lease names. Here: the objects, their checks, and the asyncio
# wait, which polls with one-try acquires (the core has no wait driven one
# try at a time for several records).

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


def _backoff(attempt: int) -> float:
    """The core's waiter backoff (seconds): full jitter, uniform in 1 ms ..
    min(1 s, 5 ms * 2^attempt)."""
    import random  # here, not at import: only the asyncio wait of a mode needs it

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

    def _acquire_ms(self, timeout_ms: int, cancel: Any,
                    busy_raises: bool = False) -> Optional[Lease]:
        # busy_raises is not passed: a mode's busy one try keeps the
        # package's own message (no one holder to name)
        return self._client._acquire_mode(
            self._key, mode=self._mode, limit=self._limit, ttl_ms=self._ttl_ms,
            timeout_ms=timeout_ms, min_hold_ms=self._min_hold_ms, auto_renew=self._auto_renew,
            on_lost=self._on_lost, cancel=cancel, on_renew_failed=self._on_renew_failed,
            fair=self._fair)

    def _check_not_mine(self) -> None:
        pass  # several holds of one thread are several holders

    def __enter__(self) -> Lease:
        # Lock's C path (with.c) is a plain lock's: a mode acquires and
        # checks its own way (_acquire_ms, _check_not_mine).
        return self._take(-1, True)

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
        return f"held by this {_who()}" + (f" ({n} holds)" if n > 1 else "")
