"""client.info() and client.locks() tell the truth about every mode: a
semaphore's and a read-write lock's records are one lock (held, its
holders, slots used, readers, writer), a released reader leaves no record,
and waiters and held time show where the backend reads them (SQLite,
PostgreSQL, MySQL/MariaDB)."""
import threading
import time



def _says_waiters(uri):
    return not uri.startswith("mongodb")  # MongoDB does not read them yet


def test_semaphore_info(client, other, key):
    assert other.info(key) is None
    sem = client.semaphore(key, 3, ttl=10)
    a, b = sem.acquire(), sem.acquire()
    info = other.info(key)
    assert info["mode"] == "semaphore" and info["state"] == "held" and info["live"] == 2
    assert info["key"] == key and info["slots"] >= 2 and info["readers"] is None
    assert sorted(h["key"] for h in info["holders"]) == sorted([a.key, b.key])
    assert info["owner"] in (a.owner, b.owner) and info["holder"].label == "pytest"
    assert other.info(a.key)["mode"] == "lock"  # a slot by its own name is itself
    a.release()
    b.release()
    info = other.info(key)
    assert info["state"] == "free" and info["holders"] == [] and info["owner"] is None


def test_rwlock_info_and_no_dead_readers(client, other, key, uri):
    rw = client.rwlock(key, ttl=10)
    for _ in range(10):
        with rw.shared:
            pass
    assert other.info(key) is None  # released readers deleted their records
    r1, r2 = rw.shared.acquire(), rw.shared.acquire()
    info = other.info(key)
    assert info["mode"] == "rwlock" and info["state"] == "held"
    assert info["readers"] == 2 and info["writer"] is False and len(info["holders"]) == 2
    r1.release()
    r2.release()
    w = rw.exclusive.acquire()
    info = other.info(key)
    assert info["writer"] is True and info["readers"] == 0 and info["fence"] == w.fence
    assert info["owner"] == w.owner
    w.release()
    assert [i["key"] for i in other.locks(key)] == [key]
    assert other.locks(key, held=True) == []


def test_waiters_and_held_for(client, other, key, uri):
    lease = client.lock(key, ttl=10).acquire()
    time.sleep(0.05)
    info = other.info(key)
    assert info["mode"] == "lock" and info["state"] == "held" and info["holders"][0]["key"] == key
    if not _says_waiters(uri):
        assert info["held_for"] is None and info["queued"] is None
        lease.release()
        return
    assert info["held_for"] >= 0.04 and info["next_owner"] is None and info["queued"] == 0
    got = []
    waiter = threading.Thread(target=lambda: got.append(
        other.lock(key, fair=True).acquire(timeout=10)))
    waiter.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        info = client.info(key)
        if info["queued"] == 1 and info["next_owner"]:
            break
        time.sleep(0.02)
    assert info["queued"] == 1 and len(info["next_owner"]) == 32, info
    lease.release()
    waiter.join()
    assert client.info(key)["owner"] == got[0].owner and client.info(key)["queued"] == 0
    got[0].release()
    assert client.info(key)["held_for"] is None  # released


def test_locks_held_filter(client, key):
    client.lock(f"{key}/free").acquire().release()
    held = client.lock(f"{key}/held").acquire()
    assert [i["key"] for i in client.locks(key)] == [f"{key}/free", f"{key}/held"]
    assert [i["key"] for i in client.locks(key, held=True)] == [f"{key}/held"]
    held.release()
