"""Argument checks of the package's Python layer: durations in
milliseconds, keys, and the errors of bad arguments (each with .code
"INVALID", as the extension raises them). The checks themselves are the
extension's (_leaselock._seconds, _leaselock._check_key), so that both
layers say the same."""
from __future__ import annotations

from datetime import timedelta
from typing import TypeVar, Union

from . import _leaselock


#: A duration: seconds (int or float) or a datetime.timedelta.
Duration = Union[float, timedelta]

_check_key = _leaselock._check_key
_seconds = _leaselock._seconds


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
