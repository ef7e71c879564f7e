"""Semaphore: a counting semaphore across processes and machines."""
from __future__ import annotations

from . import _leaselock
from ._args import _error
from ._leaselock import Lease, LockError, LockTimeout
from ._modes import _ModeLock, _live

TYPE_CHECKING = False  # typing's, without importing typing (_args.py says why)
if TYPE_CHECKING:
    from typing import Callable, Optional

    from ._args import Duration

_SEMAPHORE_MAX = 1000
# The longest suffix it adds to the key for its records (leaselock.h).
_SEMAPHORE_SUFFIX = len("/.slot/999")


def _slot_name(rest: str) -> bool:
    # As the core counts them: a plain decimal below the maximum, so that
    # another lock's records under the prefix are not counted.
    return rest.isascii() and rest.isdigit() and len(rest) <= 3 and (
        rest == "0" or rest[0] != "0")


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

    def _waited_for(self) -> str:
        return f'a slot of the semaphore "{self._key}"'

    def _repr_name(self) -> str:
        return f"Semaphore {self._key!r} limit={self._limit}"
