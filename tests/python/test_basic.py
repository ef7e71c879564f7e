"""The API on one client: acquire/release, with-blocks, leases, info."""
import os
import pwd

import pytest

import leaselock


def test_with_lock_acquires_and_releases(client, other, key):
    lock = client.lock(key, ttl=10)
    with lock as lease:
        assert isinstance(lease, leaselock.Lease)
        assert lease.held and not lease.lost
        assert lease.key == key
        assert len(lease.owner) == 32 and int(lease.owner, 16) >= 0
        assert lease.fence >= 1
        assert lease.ttl == 10.0
        assert 0 < lease.expires_in <= 10.0
        assert other.lock(key).try_acquire() is None
        rec = other.info(key)
        assert rec["owner"] == lease.owner and rec["fence"] == lease.fence
        assert 0 < rec["expires_in"] <= 10.0
        assert rec["holder"].label == "pytest" and rec["holder"].pid > 0
        host, pid, label = rec["holder"]
        assert host
    assert not lease.held and lease.expires_in == 0.0
    rec = other.info(key)
    assert rec["owner"] is None and rec["expires_in"] <= 0
    second = other.lock(key).try_acquire()
    assert second is not None and second.fence > lease.fence
    second.release()


def test_acquire_returns_a_context_manager(client, key):
    lock = client.lock(key)
    with lock.acquire(timeout=5) as lease:
        assert lease.held
    assert not lease.held
    with pytest.raises(leaselock.NotHeld) as e:
        lease.release()
    assert e.value.code == "NOT_HELD"


def test_fences_grow_on_every_acquire(client, other, key):
    fences = []
    for c in (client, other, client, other, client):
        with c.lock(key) as lease:
            fences.append(lease.fence)
    assert fences == sorted(fences) and len(set(fences)) == len(fences)


def test_busy_one_try_and_timeout(client, other, key):
    held = client.lock(key).acquire()
    lock = other.lock(key)
    assert lock.try_acquire() is None
    with pytest.raises(leaselock.LockTimeout) as e:
        lock.acquire(timeout=0)
    assert e.value.code == "BUSY"
    assert isinstance(e.value, TimeoutError) and isinstance(e.value, leaselock.LockError)
    with pytest.raises(leaselock.LockTimeout) as e:
        lock.acquire(timeout=0.2)
    assert e.value.code == "TIMEOUT"
    held.release()
    lease = lock.acquire(timeout=0)
    assert lease.held
    lease.release()


def test_blocking_acquire_wakes_when_released(client, other, key):
    import threading
    import time

    held = client.lock(key).acquire()
    got = []

    def waiter():
        with other.lock(key) as lease:
            got.append(lease.fence)

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.2)
    assert not got
    held.release()
    t.join(10)
    assert not t.is_alive() and got == [held.fence + 1]


def test_renew(client, key):
    lease = client.lock(key, ttl=5, auto_renew=False).acquire()
    lease.renew(ttl=20)
    assert lease.ttl == 20.0 and lease.expires_in > 5
    lease.renew()
    assert lease.held
    lease.release()
    with pytest.raises(leaselock.NotHeld):
        lease.renew()


def test_threading_style_acquire_release(client, other, key):
    lock = client.lock(key)
    lock.acquire()
    assert lock.locked()
    with pytest.raises(RuntimeError, match="pass reentrant=True") as e:
        lock.acquire(timeout=0)
    assert e.value.code == "INVALID"
    with pytest.raises(RuntimeError, match="pass reentrant=True"):
        with lock:
            pass
    lock.release()
    assert not lock.locked()
    with pytest.raises(leaselock.NotHeld) as e:
        lock.release()
    assert e.value.code == "NOT_HELD"


def test_force_release_info_and_locks(client, other, key):
    assert client.info(key) is None
    lease = client.lock(key).acquire()
    client.lock(key + "/b").acquire()
    names = [r["key"] for r in other.locks(key)]
    assert names == [key, key + "/b"]
    assert other.force_release(key) is True
    assert other.force_release(key) is False
    assert other.info(key)["owner"] is None
    assert other.info(key)["fence"] == lease.fence
    assert all(isinstance(r["holder"], leaselock.Holder) for r in client.locks(key))
    assert client.locks(key + "/nothing-here") == []


def test_release_of_taken_lease_is_not_held(client, other, key):
    lease = client.lock(key, auto_renew=False).acquire()
    other.force_release(key)
    with pytest.raises(leaselock.NotHeld) as e:
        lease.release()
    assert e.value.code == "NOT_HELD"


def test_exceptions_carry_codes():
    assert issubclass(leaselock.LockTimeout, leaselock.LockError)
    assert issubclass(leaselock.LockTimeout, TimeoutError)
    for cls in (leaselock.NotHeld, leaselock.LockLost, leaselock.BackendError):
        assert issubclass(cls, leaselock.LockError)
    assert leaselock.LockError.code is None


def test_repr(client, key):
    assert repr(client).startswith("<leaselock.Client ")
    assert client.backend in repr(client) and "open" in repr(client)
    lock = client.lock(key, ttl=7)
    assert repr(lock) == f"<leaselock.Lock {key!r} ttl=7s not held here>"
    with lock as lease:
        assert "held by this thread" in repr(lock)
        r = repr(lease)
        assert r.startswith(f"<leaselock.Lease {key!r} fence={lease.fence} held")
        assert "expires in" in r
    assert repr(lease).endswith("released>")


def test_password_never_shown():
    with pytest.raises(leaselock.BackendError) as e:
        leaselock.connect("mysql://user:s3cr3tpw@127.0.0.1:1/db")
    assert "s3cr3tpw" not in str(e.value)
    assert e.value.code == "BACKEND"


def test_default_uri_and_env(tmp_path, monkeypatch, key):
    # The account's home directory, whatever HOME and XDG_STATE_HOME say
    # (cron, sudo and systemd change them): one user, one default database.
    home = pwd.getpwuid(os.geteuid()).pw_dir.rstrip("/")
    want = f"sqlite://{home}/.local/state/leaselock/locks.db"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("LEASELOCK_URI", raising=False)
    assert leaselock.default_uri() == want
    monkeypatch.delenv("HOME")
    assert leaselock.default_uri() == want
    monkeypatch.setenv("LEASELOCK_URI", f"sqlite://{tmp_path}/env.db")
    with leaselock.connect() as c:
        assert c.uri.endswith("/env.db")
        with c.lock(key):
            pass
    assert (tmp_path / "env.db").exists()


def test_lease_of_another_client_is_independent(client, key):
    a = client.lock(key)
    b = client.lock(key)
    lease = a.acquire()
    # Another Lock of the client on the same key, asked by the same thread:
    # it would wait for itself, so an error at once.
    with pytest.raises(RuntimeError, match="through another Lock of this client"):
        b.try_acquire()
    lease.release()
    lease2 = b.try_acquire()
    assert lease2 is not None
    lease2.release()


def test_dropping_lease_and_lock_releases(client, other, key):
    import gc

    lock = client.lock(key)
    lease = lock.acquire()
    assert other.lock(key).try_acquire() is None
    del lease
    gc.collect()
    # The Lock keeps what it acquired until lock.release() (threading.Lock
    # style), so the key is still held.
    assert other.lock(key).try_acquire() is None
    del lock
    gc.collect()
    got = other.lock(key).try_acquire()
    assert got is not None
    got.release()


def test_a_with_block_left_in_a_dropped_cycle_is_collected(client, other, key):
    import gc
    import weakref

    # A generator stopped inside a with-block, in a reference cycle through
    # the lease's on_lost: the GC finds the cycle (and the generator's close
    # releases the lease), also after with-blocks before it left the lock a
    # stack entry the GC may have untracked (with.c keeps it for reuse).
    box = []
    lock = client.lock(key, on_lost=box.append)
    for _ in range(3):
        with lock:
            pass
    gc.collect()

    def hold():
        with lock:
            yield

    box.append(hold())
    next(box[0])
    assert other.lock(key).try_acquire() is None
    gone = weakref.ref(lock)
    del lock, box
    gc.collect()
    assert gone() is None
    got = other.lock(key).try_acquire()
    assert got is not None
    got.release()


def test_signatures_of_the_c_methods(client, key):
    import inspect

    def params(f):
        return [(p.name, p.kind.name) for p in inspect.signature(f).parameters.values()]

    assert params(leaselock.Lease.renew) == [("self", "POSITIONAL_ONLY"),
                                             ("ttl", "POSITIONAL_OR_KEYWORD"),
                                             ("min_hold", "POSITIONAL_OR_KEYWORD")]
    assert params(leaselock.Lease.release) == [("self", "POSITIONAL_ONLY")]
    assert params(leaselock.Client.close) == [("self", "POSITIONAL_ONLY")]
    assert params(leaselock.Client.force_release) == [("self", "POSITIONAL_ONLY"),
                                                      ("key", "POSITIONAL_ONLY")]
    assert params(client.force_release) == [("key", "POSITIONAL_ONLY")]
    assert params(leaselock.default_uri) == []
    with client.lock(key) as lease:
        assert str(inspect.signature(lease.renew)) == "(ttl=None, min_hold=None)"
        assert inspect.signature(leaselock.Lease.renew).parameters["ttl"].default is None
