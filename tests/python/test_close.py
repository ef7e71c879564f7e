"""close(): idempotent, releases, and any later use raises ValueError."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import leaselock


def test_use_after_close(uri, key):
    c = leaselock.connect(uri)
    lock = c.lock(key)
    lease = lock.acquire()
    c.close()
    c.close()  # idempotent
    assert c.closed and "closed" in repr(c) and "closed" in repr(lock)
    uses = [
        lambda: c.lock(key),
        lambda: c.info(key),
        lambda: c.locks(),
        lambda: c.force_release(key),
        lambda: lock.acquire(),
        lambda: lock.try_acquire(),
        lambda: lease.release(),
        lambda: lease.renew(),
        lambda: c.__enter__(),
        lambda: c.locked(key),
    ]
    for use in uses:
        with pytest.raises(ValueError, match="closed") as e:
            use()
        assert e.value.code == "INVALID"
    assert not lease.held
    with lease:  # leaving a block after close: nothing left to do
        pass


def test_close_releases_held_leases(uri, key):
    with leaselock.connect(uri) as c:
        lease = c.lock(key).acquire()
        assert lease.held
    with leaselock.connect(uri) as other:
        assert other.info(key)["owner"] is None
        assert other.lock(key).try_acquire() is not None


def test_close_stops_a_waiter(uri, key):
    with leaselock.connect(uri) as holder:
        held = holder.lock(key).acquire()
        c = leaselock.connect(uri)
        result = []

        def waiter():
            try:
                c.lock(key).acquire()
                result.append("acquired")
            except ValueError as e:
                result.append(str(e))

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.2)
        c.close()
        t.join(5)
        assert not t.is_alive()
        assert result and "closed" in result[0]
        held.release()


def test_uninitialised_client():
    c = leaselock.Client.__new__(leaselock.Client)
    with pytest.raises(ValueError, match="not initialised"):
        c.info("k")
    c.close()


def test_ctrl_c_stops_a_blocking_wait(uri, key, tmp_path):
    script = tmp_path / "wait.py"
    script.write_text(
        "import sys, leaselock\n"
        "c = leaselock.connect(sys.argv[1])\n"
        "print('waiting', flush=True)\n"
        "try:\n"
        "    with c.lock(sys.argv[2]):\n"
        "        print('acquired', flush=True)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n")
    with leaselock.connect(uri) as holder:
        held = holder.lock(key).acquire()
        p = subprocess.Popen([sys.executable, str(script), uri, key], stdout=subprocess.PIPE,
                             text=True)
        assert p.stdout.readline().strip() == "waiting"
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=10)
        assert out.strip() == "interrupted" and p.returncode == 0
        assert held.held
        held.release()


def test_close_racing_other_threads(uri, key):
    # Threads keep using the client while the main thread closes it: each
    # call either works or raises ValueError("...closed..."), nothing else.
    c = leaselock.connect(uri)
    lock = c.lock(key, ttl=5)
    errors = []
    stop = threading.Event()

    def work(i):
        while not stop.is_set():
            try:
                with lock:
                    c.info(key)
                c.locks(key)
            except ValueError as e:
                if "closed" not in str(e):
                    errors.append(e)
                return
            except BaseException as e:
                errors.append(e)
                return

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    time.sleep(0.3)
    c.close()
    stop.set()
    for t in ts:
        t.join(10)
    assert not any(t.is_alive() for t in ts)
    assert not errors, errors
    with leaselock.connect(uri) as other:
        rec = other.info(key)
        assert rec is None or rec["owner"] is None


def test_on_lost_may_close_the_client(uri, key):
    c = leaselock.connect(uri)
    closed = threading.Event()

    def on_lost(lease):
        c.close()  # from the renewal thread: the destroy is deferred
        closed.set()

    with leaselock.connect(uri) as other:
        lease = c.lock(key, ttl=0.6, on_lost=on_lost).acquire()
        other.force_release(key)
        thief = other.lock(key).acquire(timeout=5)
        assert closed.wait(10)
        time.sleep(0.05)  # the deferred destroy runs on this thread
        assert c.closed and not lease.held
        with pytest.raises(ValueError, match="closed"):
            c.info(key)
        assert other.info(key)["owner"] == thief.owner
        thief.release()


def test_lease_states_after_close(uri, key):
    c = leaselock.connect(uri)
    held = c.lock(key).acquire()
    done = c.lock(key + "/done").acquire()
    done.release()
    assert (held.state, done.state) == ("held", "released")
    c.close()
    # close() released it: the core says so, not the binding
    assert (held.state, done.state) == ("released", "released")
    assert "released" in repr(held) and not held.held and not held.lost
    with leaselock.connect(uri) as other:
        assert other.info(key)["owner"] is None


def test_close_reports_a_failed_release(tmp_path, key):
    # Another process holds SQLite's write lock past the release: close()
    # tries it, raises the backend's error, and the client is closed anyway.
    path = tmp_path / "locks.db"
    c = leaselock.connect(f"sqlite://{path}?busy_timeout_ms=50")
    lease = c.lock(key).acquire()
    p = subprocess.Popen(["sqlite3", str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    p.stdin.write("BEGIN EXCLUSIVE;\n.print locked\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "locked"
    try:
        with pytest.raises(leaselock.BackendError, match="^sqlite: release: database is locked") as e:
            c.close()
        assert e.value.code == "BACKEND"
    finally:
        p.stdin.write("COMMIT;\n")
        p.stdin.close()
        p.wait(10)
    assert c.closed and not lease.held
    c.close()  # closed: nothing more to do
    with leaselock.connect(f"sqlite://{path}") as other:
        assert other.force_release(key)


def test_close_ends_a_wait_with_the_cores_message(uri, key):
    with leaselock.connect(uri) as holder:
        held = holder.lock(key).acquire()
        c = leaselock.connect(uri)
        errors = []

        def waiter():
            try:
                c.lock(key).acquire(timeout=30)
            except ValueError as e:
                errors.append(e)

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.3)
        c.close()
        t.join(5)
        assert not t.is_alive()
        assert "the client was closed while waiting for" in str(errors[0])
        assert errors[0].code == "INVALID"
        held.release()


def test_acquire_takes_keywords(client, key):
    with pytest.raises(TypeError, match="one positional argument"):
        client._acquire(key, 1000, 0)
    with pytest.raises(TypeError, match="ttl_ms and timeout_ms"):
        client._acquire(key, ttl_ms=1000)
    with pytest.raises(TypeError, match="unexpected keyword argument 'ttl'"):
        client._acquire(key, ttl=1000, ttl_ms=1000, timeout_ms=0)
    lease = client._acquire(key, ttl_ms=1000, timeout_ms=0)
    assert lease.held and lease.ttl == 1.0
    lease.release()
