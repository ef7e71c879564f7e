"""An SQLite file locked by another process (a long transaction): waiting
on it is waiting, bounded by the caller's timeout, never a BackendError
after busy_timeout_ms."""
import logging
import subprocess
import sys
import time

import pytest

import leaselock

HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def locked(sqlite_uri):
    """The file of sqlite_uri, set up, then held by BEGIN EXCLUSIVE in
    another process for the test's duration."""
    c = leaselock.connect(sqlite_uri, label="pytest")
    c.lock("warm").acquire(timeout=0).release()
    path = sqlite_uri[len("sqlite://"):]
    p = subprocess.Popen([sys.executable, "-c", HOLDER, path], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "locked"
        yield c
    finally:
        p.stdin.close()
        p.wait(10)
        c.close()


def test_one_try_is_busy_at_once(locked, caplog):
    caplog.set_level(logging.WARNING, logger="leaselock")
    t0 = time.monotonic()
    assert locked.lock("k").try_acquire() is None
    with pytest.raises(leaselock.LockTimeout):
        locked.lock("k").acquire(timeout=0)
    assert time.monotonic() - t0 < 1
    assert any(getattr(r, "event", "") == "lock_wait" for r in caplog.records)


def test_timeout_is_the_callers(locked):
    t0 = time.monotonic()
    with pytest.raises(leaselock.LockTimeout):
        locked.lock("k").acquire(timeout=1)
    took = time.monotonic() - t0
    assert 0.9 < took < 2.5
