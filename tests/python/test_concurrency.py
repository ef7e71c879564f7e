"""Threads and processes contending on one key: no lost update, fences
increasing in the order the critical sections ran."""
import multiprocessing
import os
import threading
import time

import pytest

import leaselock

THREADS = 8
ROUNDS = 15


def test_threads_contend(client, key):
    lock = client.lock(key, ttl=10)  # one Lock object shared by all threads
    state = {"counter": 0, "inside": 0}
    fences = []
    errors = []

    def work():
        try:
            for _ in range(ROUNDS):
                with lock as lease:
                    state["inside"] += 1
                    assert state["inside"] == 1, "two threads inside at once"
                    v = state["counter"]
                    time.sleep(0.0005)  # invite a lost update
                    state["counter"] = v + 1
                    fences.append(lease.fence)
                    state["inside"] -= 1
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors
    assert state["counter"] == THREADS * ROUNDS
    assert fences == sorted(fences) and len(set(fences)) == len(fences)


def test_threads_with_own_clients(uri, key):
    clients = [leaselock.connect(uri) for _ in range(4)]
    counter = [0]
    fences = []

    def work(c):
        for _ in range(ROUNDS):
            with c.lock(key, ttl=10) as lease:
                v = counter[0]
                time.sleep(0.0005)
                counter[0] = v + 1
                fences.append(lease.fence)

    ts = [threading.Thread(target=work, args=(c,)) for c in clients]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    for c in clients:
        c.close()
    assert counter[0] == 4 * ROUNDS
    assert fences == sorted(fences) and len(set(fences)) == len(fences)


def _proc_work(uri, key, path, rounds):
    # Runs in a child (fork or spawn): a read-modify-write of a file under
    # the lock, appending the fence seen.
    with leaselock.connect(uri) as c:
        lock = c.lock(key, ttl=10)
        for _ in range(rounds):
            with lock as lease:
                with open(path) as f:
                    lines = f.read().split()
                time.sleep(0.001)
                lines.append(str(lease.fence))
                with open(path + ".tmp", "w") as f:
                    f.write("\n".join(lines))
                os.replace(path + ".tmp", path)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_processes_contend(uri, key, tmp_path, method):
    path = str(tmp_path / "ledger")
    open(path, "w").close()
    ctx = multiprocessing.get_context(method)
    procs = [ctx.Process(target=_proc_work, args=(uri, key, path, 10)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    with open(path) as f:
        fences = [int(x) for x in f.read().split()]
    assert len(fences) == 40  # no lost update
    assert fences == sorted(fences) and len(set(fences)) == 40


def test_a_new_thread_does_not_inherit_an_ended_threads_lease(client, other, key):
    # Thread identifiers are reused once a thread ends: a new thread must
    # not see (nor release) what an ended thread acquired through the Lock.
    lock = client.lock(key)
    kept = []

    def first():
        kept.append((threading.get_ident(), lock.acquire()))

    t = threading.Thread(target=first)
    t.start()
    t.join()
    ident, lease = kept[0]
    assert lease.held

    for _ in range(20):  # usually the very first new thread reuses the ident
        seen = {}

        def second():
            seen["ident"] = threading.get_ident()
            seen["repr"] = repr(lock)
            try:
                lock.release()
                seen["release"] = "released"
            except leaselock.NotHeld:
                seen["release"] = "NotHeld"
            seen["try"] = lock.try_acquire()

        t = threading.Thread(target=second)
        t.start()
        t.join()
        assert "not held here" in seen["repr"]
        assert seen["release"] == "NotHeld"
        assert seen["try"] is None  # the ended thread's lease still holds the key
        assert lease.held and other.info(key)["owner"] == lease.owner
        if seen["ident"] == ident:
            break
    lease.release()
    assert other.info(key)["owner"] is None


def test_a_lease_left_by_an_ended_thread_is_released_once_unreachable(client, other, key):
    # Nobody can release it through the Lock any more (release() is per
    # thread): like any dropped Lease, it is released, not renewed forever.
    lock = client.lock(key)
    t = threading.Thread(target=lock.acquire)
    t.start()
    t.join()
    deadline = time.monotonic() + 5
    while other.info(key)["owner"] is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert other.info(key)["owner"] is None
    assert lock.try_acquire() is not None
    lock.release()
