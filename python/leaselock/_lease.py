"""Lease.renew with durations as the rest of the package takes them. Lease
is the extension's type (leaselock._leaselock.Lease); importing this module
wraps its renew method once."""
from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any, Optional

from ._args import Duration, _error
from ._leaselock import Lease

# Lease.renew takes durations as the rest of the package does: seconds or a
# datetime.timedelta. The extension's method takes seconds; this wrapper,
# set on the extension's type, converts a timedelta (for ttl and for any
# other duration the method takes) and leaves the checks of values
# to the method. inspect.signature() and help() show the method's own.
_c_renew = getattr(Lease.renew, "__wrapped__", Lease.renew)  # once, also on a reload


@functools.wraps(_c_renew)
def _renew(self: Lease, /, ttl: Optional[Duration] = None, *args: Any, **kwargs: Any) -> None:
    if isinstance(ttl, timedelta):
        ttl = ttl.total_seconds()
    elif ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float))):
        raise _error(TypeError, "ttl must be a number of seconds (int or float) or a "
                     f"datetime.timedelta or None, not {type(ttl).__name__}")
    args = tuple(a.total_seconds() if isinstance(a, timedelta) else a for a in args)
    for name, value in kwargs.items():
        if isinstance(value, timedelta):
            kwargs[name] = value.total_seconds()
    _c_renew(self, ttl, *args, **kwargs)


_renew.__doc__ = f"{_c_renew.__doc__ or ''} Durations may also be datetime.timedelta.".strip()
setattr(Lease, "renew", _renew)
