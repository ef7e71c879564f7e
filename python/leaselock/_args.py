"""Argument checks of the package's Python layer: durations in
milliseconds, keys, and the errors of bad arguments (each with .code
"INVALID", as the extension raises them). The checks themselves are the
extension's (_leaselock._seconds, _leaselock._check_key), so that both
layers say the same."""
from __future__ import annotations

from . import _leaselock

# typing.TYPE_CHECKING without importing typing: typing (with the re, enum
# and contextlib it imports) and datetime were most of `import leaselock`.
# Type checkers take any TYPE_CHECKING as true; the annotations are strings
# (from __future__ import annotations), never evaluated at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from datetime import timedelta
    from typing import Optional, TypeVar, Union

    #: A duration: seconds (int or float) or a datetime.timedelta.
    Duration = Union[float, timedelta]

    E = TypeVar("E", bound=BaseException)

_check_key = _leaselock._check_key
_seconds = _leaselock._seconds


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
    if (isinstance(value, (int, float)) and not isinstance(value, bool)) or (
            value is None and kind == "timeout"):
        return _seconds(value, name, kind)
    secs = _timedelta_seconds(value)
    if secs is not None:
        return _seconds(secs, name, kind)
    none = " or None" if kind == "timeout" else ""
    raise _error(TypeError, f"{name} must be a number of seconds (int or float) or a "
                 f"datetime.timedelta{none}, not {type(value).__name__}")


def _timedelta_seconds(value: object) -> Optional[float]:
    """value.total_seconds() when value is a datetime.timedelta, else None.
    datetime is imported only for a value that is no number nor None: the
    usual durations never need it."""
    if value is None or isinstance(value, (int, float)):
        return None
    from datetime import timedelta

    return value.total_seconds() if isinstance(value, timedelta) else None
