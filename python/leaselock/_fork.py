"""What a forked child forgets of its parent's Python-level state.

Fork handling has three layers, each for what the one below does not do:

- the C core (csrc/engine.c, its pthread_atfork): its mutexes, the
  connections (none is in use across the fork; the parent's are abandoned
  in the child), the renewal thread, and the leases (a child holds none of
  its parent's; the core refuses to act on them there);
- the extension (python/fork.c, its own pthread_atfork): the process id a
  Lease compares with, so that its getters say "foreign" in a child
  without a system call;
- this module (os.register_at_fork): the package's own state. A Lock
  remembers which threads and tasks hold what through it, and the asyncio
  machinery (_aio.py) has a thread pool, mutexes and waiters of event
  loops: the child has none of those threads (a mutex one of them held
  would stay locked) and none of those loops.
"""
from __future__ import annotations

import os
import threading
import weakref

from . import _aio, _leaselock
from . import _lock
from ._lock import _locks


def _after_fork_child() -> None:
    # The child holds none of its parent's leases: forget which threads
    # held what. The pool's threads and the parent's event loops are not
    # in the child.
    for lock in list(_locks):
        lock._threads = threading.local()
        lock._tasks = weakref.WeakKeyDictionary()
    _leaselock._thread_holds_reset()
    _lock._task_holds = weakref.WeakKeyDictionary()
    _aio._pool = None
    _aio._pool_mu = threading.Lock()
    _aio._wakers_mu = threading.Lock()
    _aio._gates_mu = threading.Lock()
    _aio._wakers.clear()
    _aio._gates.clear()


os.register_at_fork(after_in_child=_after_fork_child)
