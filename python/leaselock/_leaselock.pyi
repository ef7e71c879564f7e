# Type stubs for the C extension leaselock._leaselock.
from datetime import timedelta
from typing import Any, Callable, Literal, Optional, Self, final

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

class LockTimeout(LockError, TimeoutError): ...
class NotHeld(LockError): ...
class LockLost(LockError): ...
class BackendError(LockError): ...

_Record = tuple[str, Optional[str], int, int, str, int, Optional[str], int]

class Client:
    def __init__(self, uri: Optional[str] = None, *, label: Optional[str] = None) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def uri(self) -> str: ...
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
    # on_lost is called from the core's renewal thread only: the package's
    # Lock refuses on_lost with auto_renew=False (ValueError).
    def _acquire(
        self,
        key: str,
        /,
        *,
        ttl_ms: int,
        timeout_ms: int,
        min_hold_ms: int = 0,
        auto_renew: bool = True,
        on_lost: Optional[Callable[["Lease"], Any]] = None,
        cancel: Any = None,
        on_renew_failed: Optional[Callable[["Lease", LockError, float], Any]] = None,
        fair: bool = False,
    ) -> Optional["Lease"]: ...
    # mode "semaphore" (with limit 1 .. 1000), "shared" or "exclusive"; the
    # Lease returned is named by its record (key/.slot/<i>, key/.rw/...).
    def _acquire_mode(
        self,
        key: str,
        /,
        *,
        mode: Literal["semaphore", "shared", "exclusive"],
        limit: int = 0,
        ttl_ms: int,
        timeout_ms: int,
        min_hold_ms: int = 0,
        auto_renew: bool = True,
        on_lost: Optional[Callable[["Lease"], Any]] = None,
        cancel: Any = None,
        on_renew_failed: Optional[Callable[["Lease", LockError, float], Any]] = None,
        fair: bool = False,
    ) -> Optional["Lease"]: ...
    def _wait(
        self,
        key: str,
        /,
        *,
        ttl_ms: int,
        timeout_ms: int,
        min_hold_ms: int = 0,
        auto_renew: bool = True,
        on_lost: Optional[Callable[["Lease"], Any]] = None,
        on_renew_failed: Optional[Callable[["Lease", LockError, float], Any]] = None,
        fair: bool = False,
    ) -> "_Wait": ...
    def _inspect(self, key: str) -> Optional[_Record]: ...
    def _list(self, prefix: str) -> list[_Record]: ...

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

def default_uri() -> str: ...
def _check_key(key: str, name: str = ...) -> str: ...
def _seconds(value: Optional[float], name: str, kind: str) -> int: ...
def _shutdown() -> None: ...
