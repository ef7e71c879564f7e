"""Observability: the "leaselock" logger, client.stats(), client.prometheus()
and on_renew_failed."""
import logging
import math
import sqlite3
import threading
import time

import pytest

import leaselock

LOGGER = "leaselock"


def events(caplog, name=None):
    """The (levelno, event, key, fence) of the records of the leaselock
    logger, optionally only those of event name."""
    return [(r.levelno, r.event, r.key, r.fence) for r in caplog.records
            if r.name == LOGGER and (name is None or r.event == name)]


def test_acquire_busy_wait_release_are_logged(client, other, key, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    held = other.lock(key).acquire(timeout=0)
    lock = client.lock(key, ttl=5)
    assert lock.try_acquire() is None
    with pytest.raises(leaselock.LockTimeout):
        lock.acquire(timeout=0.2)
    held.release()
    with lock.acquire(timeout=0) as lease:
        fence = lease.fence
    assert events(caplog, "busy") == [(logging.DEBUG, "busy", key, 0)]
    assert events(caplog, "wait")[0][:3] == (logging.DEBUG, "wait", key)
    assert events(caplog, "timeout") == [(logging.INFO, "timeout", key, 0)]
    # Both clients log; this client's acquire and release carry its fence.
    assert (logging.DEBUG, "acquire", key, fence) in events(caplog, "acquire")
    assert (logging.DEBUG, "release", key, fence) in events(caplog, "release")
    text = [r.getMessage() for r in caplog.records if getattr(r, "event", "") == "acquire"]
    assert any(f'"{key}" (fence {fence})' in t for t in text)


def test_nothing_below_the_loggers_level(client, key, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with client.lock(key).acquire(timeout=0):
        pass
    assert events(caplog) == []
    # The level is followed: DEBUG from the next call on.
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    with client.lock(key).acquire(timeout=0):
        pass
    assert [e[1] for e in events(caplog)] == ["acquire", "release"]


def test_a_with_block_follows_every_change_of_the_logger(client, key, caplog):
    # The with-block keeps the level it read while the logger is unchanged:
    # each way of changing what isEnabledFor says is followed at once.
    lock = client.lock(key)
    log = logging.getLogger(LOGGER)

    def logged():
        caplog.clear()
        for _ in range(2):
            with lock:
                pass
        return [e[1] for e in events(caplog)]

    caplog.set_level(logging.WARNING, logger=LOGGER)
    assert logged() == []
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    assert logged() == ["acquire", "release"] * 2
    log.disabled = True
    try:
        assert logged() == []
        log.setLevel(logging.DEBUG)  # read while disabled: off
        assert logged() == []
    finally:
        log.disabled = False
    assert logged() == ["acquire", "release"] * 2
    logging.disable(logging.INFO)
    try:
        assert logged() == []
    finally:
        logging.disable(logging.NOTSET)
    assert logged() == ["acquire", "release"] * 2
    root = logging.getLogger()
    root_level = root.level
    root.setLevel(logging.ERROR)  # the parent's: not the logger's while it has its own
    try:
        assert logged() == ["acquire", "release"] * 2
        caplog.set_level(logging.NOTSET, logger=LOGGER)  # from then on, the parent's
        assert logged() == []
    finally:
        root.setLevel(root_level)


def test_loss_is_logged_as_an_error(client, other, key, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    lost = threading.Event()
    lock = client.lock(key, ttl=0.6, on_lost=lambda lease: lost.set())
    with pytest.raises(leaselock.LockLost):
        with lock:
            other.force_release(key)
            assert lost.wait(5)
    (level, _, k, fence), = events(caplog, "lost")
    assert (level, k) == (logging.ERROR, key) and fence > 0
    assert events(caplog, "release_failed") == [] or \
        events(caplog, "release_failed")[0][0] == logging.WARNING
    assert client.stats()["losses"] == 1


def test_stats_count_and_time(client, other, key):
    held = other.lock(key).acquire(timeout=0)
    lock = client.lock(key, ttl=5)
    assert lock.try_acquire() is None
    with pytest.raises(leaselock.LockTimeout):
        lock.acquire(timeout=0.1)
    held.release()
    with lock.acquire(timeout=0):
        assert client.stats()["leases_held"] == 1
        time.sleep(0.05)
    s = client.stats()
    assert (s["acquires"], s["busy"], s["waits"], s["timeouts"], s["releases"]) == (1, 1, 1, 1, 1)
    assert (s["losses"], s["leases_held"], s["backend_errors"]) == (0, 0, 0)
    assert s["wait_seconds"] >= 0.09 and s["held_seconds"] >= 0.04
    assert s["requests"] >= 4
    bounds = [b for b, _ in s["latency_buckets"]]
    assert bounds == sorted(bounds) and math.isinf(bounds[-1])
    assert sum(n for _, n in s["latency_buckets"]) == s["requests"]
    assert s["latency_sum_seconds"] > 0
    text = client.prometheus('app="test"')
    assert 'leaselock_acquires_total{app="test"} 1\n' in text
    assert 'leaselock_request_duration_seconds_bucket{app="test",le="+Inf"}' in text
    client.close()
    assert client.stats()["acquires"] == 1  # still readable once closed


@pytest.mark.slow
def test_renew_failed_hook_and_log(tmp_path, key, caplog):
    """The database stays locked by another connection for a while: the
    renewals fail (SQLite busy), on_renew_failed runs with the error and
    the time left, the logger warns, and the lease survives."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    path = tmp_path / "locks.db"
    client = leaselock.connect(f"sqlite://{path}?busy_timeout_ms=20")
    calls = []
    failed = threading.Event()

    def on_renew_failed(lease, error, left):
        calls.append((lease.held, type(error), error.code, left))
        failed.set()

    lock = client.lock(key, ttl=1.5, on_renew_failed=on_renew_failed)
    with lock as lease:
        blocker = sqlite3.connect(str(path), isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        try:
            assert failed.wait(3)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        time.sleep(0.8)  # renewed again meanwhile
        assert lease.held
    held, etype, code, left = calls[0]
    assert held and issubclass(etype, leaselock.BackendError) and code == "BACKEND"
    assert 0 < left < 1.5
    warn = events(caplog, "renew_failed")
    assert warn and warn[0][:3] == (logging.WARNING, "renew_failed", key)
    assert "retrying" in [r for r in caplog.records if r.event == "renew_failed"][0].getMessage()
    s = client.stats()
    assert s["renewal_failures"] >= 1 and s["renewals"] >= 1 and s["losses"] == 0
    client.close()


def test_on_renew_failed_must_be_callable(client, key):
    with pytest.raises(TypeError):
        client.lock(key, on_renew_failed=3).acquire(timeout=0)
