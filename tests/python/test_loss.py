"""Loss detection: renewal made impossible -> on_lost called, LockLost at
exit; min_hold."""
import threading
import time

import pytest

import leaselock


def _take_over(other, key):
    other.force_release(key)
    return other.lock(key, ttl=30).acquire(timeout=5)


def test_lost_lease_calls_on_lost_and_raises_at_exit(client, other, key):
    lost = threading.Event()
    seen = []

    def on_lost(lease):
        seen.append((lease.key, lease.lost, threading.current_thread() is not threading.main_thread()))
        lost.set()

    lock = client.lock(key, ttl=0.6, on_lost=on_lost)
    with pytest.raises(leaselock.LockLost) as e:
        with lock as lease:
            thief = _take_over(other, key)
            assert lost.wait(10), "on_lost was not called"
            assert lease.lost and not lease.held
    assert e.value.code in ("LOST", "NOT_HELD")
    assert seen == [(key, True, True)]
    # The thief's lease is untouched by the loser's exit.
    assert other.info(key)["owner"] == thief.owner
    with pytest.raises(leaselock.LockLost):
        lease.renew()
    thief.release()


def test_lockLost_chains_the_body_exception(client, other, key):
    lost = threading.Event()
    lock = client.lock(key, ttl=0.6, on_lost=lambda lease: lost.set())
    with pytest.raises(leaselock.LockLost) as e:
        with lock:
            thief = _take_over(other, key)
            assert lost.wait(10)
            raise KeyError("body")
    assert isinstance(e.value.__context__, KeyError)
    thief.release()


def test_taken_without_renewal_raises_at_exit(client, other, key):
    # No auto-renew: the loss is found by the release at exit.
    with pytest.raises(leaselock.LockLost) as e:
        with client.lock(key, ttl=30, auto_renew=False):
            other.force_release(key)
    assert e.value.code == "NOT_HELD"


def test_local_deadline_marks_lost(client, key):
    lease = client.lock(key, ttl=0.3, auto_renew=False).acquire()
    time.sleep(0.5)
    assert lease.lost and not lease.held and lease.expires_in == 0.0
    assert "lost" in repr(lease)
    with pytest.raises(leaselock.LockLost):
        lease.__exit__(None, None, None)


@pytest.mark.slow
def test_auto_renew_keeps_a_short_lease(client, other, key):
    with client.lock(key, ttl=1.0) as lease:
        time.sleep(2.5)  # renewed every ~0.33 s
        assert lease.held
        assert other.lock(key).try_acquire() is None
    assert not lease.lost


def test_on_lost_exception_is_reported_not_fatal(client, other, key):
    import sys

    called = threading.Event()
    hooked = []
    old = sys.unraisablehook
    sys.unraisablehook = lambda u: hooked.append(u.exc_type)
    try:
        def on_lost(lease):
            called.set()
            raise RuntimeError("callback bug")

        lease = client.lock(key, ttl=0.6, on_lost=on_lost).acquire()
        thief = _take_over(other, key)
        assert called.wait(10)
        deadline = time.monotonic() + 5
        while not hooked and time.monotonic() < deadline:
            time.sleep(0.01)
        assert hooked == [RuntimeError]
        assert lease.lost
        thief.release()
    finally:
        sys.unraisablehook = old


def test_min_hold_keeps_key_after_release(client, other, key):
    with client.lock(key, min_hold=30) as lease:
        pass
    assert not lease.held
    rec = other.info(key)
    assert rec["owner"] is None and rec["expires_in"] > 20
    assert other.lock(key).try_acquire() is None
    assert other.lock(key).locked()
    other.force_release(key)
    got = other.lock(key).try_acquire()
    assert got is not None and got.fence == lease.fence + 1
    got.release()


@pytest.mark.slow
def test_min_hold_passes(client, other, key):
    with client.lock(key, min_hold=1.0):
        pass
    assert other.lock(key).try_acquire() is None
    lease = other.lock(key).acquire(timeout=10)
    assert lease.held
    lease.release()


def test_lost_lease_raises_at_exit_after_repr_and_try_acquire(client, other, key):
    # repr(lock) and the reentrancy check of try_acquire() look at the
    # thread's leases; they must not forget the lost one before the exit.
    lost = threading.Event()
    lock = client.lock(key, ttl=0.6, on_lost=lambda lease: lost.set())
    with pytest.raises(leaselock.LockLost):
        with lock as lease:
            thief = _take_over(other, key)
            assert lost.wait(10)
            assert lease.lost
            assert "not held here" in repr(lock)
            assert lock.try_acquire() is None  # the thief holds it
            assert "not held here" in repr(lock)
    assert other.info(key)["owner"] == thief.owner
    thief.release()


def test_lost_lease_raises_at_exit_after_reacquire_in_the_body(client, other, key):
    # Expired without renewal, then taken again by the same Lock in the
    # body: the block still reports its own lease as lost, and the new
    # lease is left to the body's owner (here: lock.release()).
    lock = client.lock(key, ttl=0.2, auto_renew=False)
    with pytest.raises(leaselock.LockLost):
        with lock as lease:
            time.sleep(0.6)
            assert lease.lost
            repr(lock)
            second = lock.try_acquire()
            assert second is not None and second.held
            assert "held by this thread" in repr(lock)
    assert second.held and other.info(key)["owner"] == second.owner
    lock.release()
    assert not second.held and other.info(key)["owner"] is None
    with pytest.raises(leaselock.NotHeld):
        lock.release()
