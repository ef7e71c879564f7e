"""Lease.renew with durations as the rest of the package takes them. Lease
is the extension's type (leaselock._leaselock.Lease); importing this module
wraps its renew method once."""
from __future__ import annotations

import functools

from ._args import _error, _timedelta_seconds
from ._leaselock import Lease

TYPE_CHECKING = False  # typing's, without importing typing (_args.py says why)
if TYPE_CHECKING:
    from typing import Any, Optional

    from ._args import Duration

# Lease.renew takes durations as the rest of the package does: seconds or a
# datetime.timedelta. The extension's method takes seconds; this wrapper,
# set on the extension's type, converts a timedelta (for ttl and for any
# other duration the method takes) and leaves the checks of values
# to the method. inspect.signature() and help() show the method's own.
_c_renew = getattr(Lease.renew, "__wrapped__", Lease.renew)  # once, also on a reload


@functools.wraps(_c_renew)
def _renew(self: Lease, /, ttl: Optional[Duration] = None, *args: Any, **kwargs: Any) -> None:
    secs = _timedelta_seconds(ttl)
    if secs is not None:
        ttl = secs
    elif ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float))):
        raise _error(TypeError, "ttl must be a number of seconds (int or float) or a "
                     f"datetime.timedelta or None, not {type(ttl).__name__}")
    args = tuple(a if (s := _timedelta_seconds(a)) is None else s for a in args)
    for name, value in kwargs.items():
        secs = _timedelta_seconds(value)
        if secs is not None:
            kwargs[name] = secs
    _c_renew(self, ttl, *args, **kwargs)


_renew.__doc__ = f"{_c_renew.__doc__ or ''} Durations may also be datetime.timedelta.".strip()
setattr(Lease, "renew", _renew)
