# Type stubs for the C extension leaselock._leaselock.
from datetime import timedelta
from typing import Any, Callable, Literal, Optional, Required, Self, TypedDict, Unpack, final

__version__: str

OK: int
BUSY: int
TIMEOUT: int
NOT_HELD: int
LOST: int
INVALID: int
BACKEND: int
UNSUPPORTED: int
NOMEM: int
INTERRUPTED: int

class LockError(Exception):
    code: Optional[str]

class LockTimeout(LockError, TimeoutError):
    """The lock stayed busy until the timeout ran out (code TIMEOUT, or BUSY
    for a single try). When the core could read who held the key (one read,
    only when the acquire gives up): holder (a leaselock.Holder: host, pid,
    label), fence and expires_in (seconds by the database's clock), also
    named in the message; else None (a semaphore, a read-write lock, a key
    free again by then)."""

    holder: Optional[Any]
    fence: Optional[int]
    expires_in: Optional[float]

class NotHeld(LockError): ...
class LockLost(LockError): ...
class BackendError(LockError): ...

# (key, owner, fence, expires_in_ms, host, pid, label, holds, next_owner,
# queued, held_ms): None where nobody waits or the backend does not say.
_Record = tuple[
    str, Optional[str], int, int, str, int, Optional[str], int, Optional[str], Optional[int],
    Optional[int],
]
# (key, mode, state, live, record, holders, slots, readers, writer,
# next_owner, queued): a lock with a mode's records as one (leaselock_locks).
_LockTuple = tuple[
    str,
    Literal["lock", "semaphore", "rwlock"],
    Literal["held", "min-hold", "free"],
    int,
    Optional[_Record],
    list[_Record],
    int,
    int,
    bool,
    Optional[str],
    Optional[int],
]
# (level, policy, detail, primary ("" when none), fence_floor,
# lock_delay_ms, max_ttl_ms (0: no bound)): the package's Durability.
_Durability = tuple[
    Literal["durable", "at-risk", "standalone", "unknown"],
    Literal["report", "require", "off"],
    str,
    str,
    int,
    int,
    int,
]

class _WaitOptions(TypedDict, total=False):
    """The keyword arguments of Client._wait (and of the acquires)."""

    ttl_ms: Required[int]
    timeout_ms: Required[int]
    min_hold_ms: int
    auto_renew: bool
    # Called from the core's renewal thread only: the package's Lock
    # refuses on_lost with auto_renew=False (ValueError).
    on_lost: Optional[Callable[["Lease"], Any]]
    on_renew_failed: Optional[Callable[["Lease", LockError, float], Any]]
    fair: bool

class _AcquireOptions(_WaitOptions, total=False):
    """The keyword arguments of Client._acquire and _acquire_mode."""

    cancel: Any  # None or an object with is_set()
    busy_raises: bool  # a busy one try raises LockTimeout (code BUSY) instead of None

class Client:
    def __init__(self, uri: Optional[str] = None, *, label: Optional[str] = None) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def uri(self) -> str:
        """The database this client uses (the default or $LEASELOCK_URI
        resolved), with any password shown as ***."""
    @property
    def backend(self) -> str: ...
    @property
    def label(self) -> Optional[str]: ...
    def close(self) -> None: ...
    def force_release(self, key: str, /) -> bool: ...
    def prune(self, prefix: str = "", older_than: float | timedelta = 0) -> int: ...
    # Counters since the client was created: int values, except
    # wait_seconds, held_seconds, latency_sum_seconds (float) and
    # latency_buckets (list of (upper bound in seconds, count)).
    def stats(self) -> dict[str, Any]: ...
    def prometheus(self, labels: str = "", /) -> str: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: Any) -> None: ...
    # The core's acquires; the package's Lock, Semaphore and RWLock check
    # the arguments first. _acquire_mode: mode "semaphore" (with limit
    # 1 .. 1000), "shared" or "exclusive"; its Lease is named by its record
    # (key/.slot/<i>, key/.rw/...). None: one try (timeout_ms 0) found the
    # key busy.
    def _acquire(self, key: str, /, **options: Unpack[_AcquireOptions]) -> Optional["Lease"]: ...
    def _acquire_mode(
        self,
        key: str,
        /,
        *,
        mode: Literal["semaphore", "shared", "exclusive"],
        limit: int = 0,
        **options: Unpack[_AcquireOptions],
    ) -> Optional["Lease"]: ...
    def _wait(self, key: str, /, **options: Unpack[_WaitOptions]) -> "_Wait": ...
    def _inspect(self, key: str) -> Optional[_Record]: ...
    def _explain(self, key: str, timed_out: bool, waited_ms: int, message: str, /) -> LockTimeout: ...
    def _list(self, prefix: str) -> list[_Record]: ...
    def _lock_info(self, key: str) -> Optional[_LockTuple]: ...
    def _locks(self, prefix: str) -> list[_LockTuple]: ...
    def _durability(self) -> _Durability: ...

@final
class _Wait:
    def try_(self) -> tuple[Optional["Lease"], float]: ...
    def close(self) -> None: ...

@final
class Lease:
    @property
    def key(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def holds(self) -> int: ...
    def _reenter(self) -> None: ...
    @property
    def ttl(self) -> float: ...
    @property
    def held(self) -> bool: ...
    @property
    def lost(self) -> bool: ...
    @property
    def state(self) -> Literal["held", "released", "lost", "closed", "foreign"]: ...
    @property
    def expires_in(self) -> float: ...
    # Seconds or a timedelta (the package wraps the extension's method,
    # which takes seconds).
    def renew(
        self,
        ttl: Optional[float | timedelta] = None,
        min_hold: Optional[float | timedelta] = None,
    ) -> None: ...
    def release(self) -> None: ...
    def __enter__(self) -> "Lease": ...
    def __exit__(self, *exc: Any) -> bool: ...

def default_uri() -> str:
    """The embedded SQLite URI used when no URI and no $LEASELOCK_URI are
    given: ~/.local/state/leaselock/locks.db in the home directory of the
    process's account (the password database's, not $HOME: cron, sudo and
    a shell find the same one for a user)."""
def _check_key(key: str, name: str = ...) -> str: ...
def _seconds(value: Optional[float], name: str, kind: str) -> int: ...
def _shutdown() -> None: ...
# with.c: the holds registry of _lock.py, and Lock's with-block (its base).
def _holds_note(reg: dict[Any, Any], name: str, lease: Lease, mode: str) -> None: ...
def _holds_find(reg: dict[Any, Any], client: Client, name: str) -> list[tuple[Lease, str]]: ...
def _thread_holds() -> dict[Any, Any]: ...
def _thread_holds_reset() -> None: ...
def _aio_wakers(wakers: dict[Any, Any]) -> None: ...

class _LockBase:
    _client: Client
    _key: str
    _wake: str
    _ttl_ms: int
    _min_hold_ms: int
    _auto_renew: bool
    _on_lost: Optional[Callable[[Lease], object]]
    _on_renew_failed: Optional[Callable[[Lease, LockError, float], object]]
    _fair: bool
    _reentrant: bool
    _threads: Any
    def __enter__(self) -> Lease: ...
    def __exit__(self, et: Any, ev: Any, tb: Any) -> None: ...
