"""Counting semaphores (client.semaphore) and read-write locks
(client.rwlock): the core's modes (csrc/modes.c) through the package's lock
objects, on every backend whose server is up."""
import asyncio
import logging
import multiprocessing
import signal
import subprocess
import sys
import threading
import time

import pytest

import leaselock


def _fences_grow_per_record(leases):
    by_key = {}
    for lease in leases:
        by_key.setdefault(lease.key, []).append(lease.fence)
    for fences in by_key.values():
        assert fences == sorted(fences) and len(set(fences)) == len(fences), by_key


# ---- semaphores ---------------------------------------------------------------


def test_semaphore_limit_3(client, other, key):
    sem = client.semaphore(key, 3, ttl=10)
    theirs = other.semaphore(key, limit=3, ttl=10)
    assert sem.limit == 3 and sem.key == key and sem.available() == 3
    held = [sem.acquire(), sem.try_acquire(), theirs.acquire(timeout=1)]
    assert all(lease is not None and lease.held for lease in held)
    # Each holder has a lease of its own on a slot beside the key.
    assert len({lease.owner for lease in held}) == 3
    assert sorted(lease.key for lease in held) == [f"{key}/.slot/{i}" for i in range(3)]
    for lease in held:
        assert other.info(lease.key)["owner"] == lease.owner
    assert sem.available() == 0 and sem.locked() and theirs.locked()
    assert sem.try_acquire() is None and theirs.try_acquire() is None
    with pytest.raises(leaselock.LockTimeout) as e:
        sem.acquire(timeout=0.2)
    assert e.value.code == "TIMEOUT"
    assert str(e.value).startswith("timed out after ") and f'semaphore "{key}"' in str(e.value)
    with pytest.raises(leaselock.LockTimeout) as e:
        theirs.acquire(timeout=0)
    assert e.value.code == "BUSY"
    assert str(e.value) == f'semaphore "{key}": no free slot (the limit is 3)'
    assert "held by this thread (2 holds)" in repr(sem)

    sem.release()  # the last this thread took through sem
    assert not held[1].held and held[0].held
    assert sem.available() == 1
    again = theirs.try_acquire()
    assert again is not None and again.key == held[1].key  # the one free slot
    assert again.fence > held[1].fence
    theirs.release()
    theirs.release()
    sem.release()
    with pytest.raises(leaselock.NotHeld):
        sem.release()
    assert sem.available() == 3 and not sem.locked()

    # Fences grow per slot.
    leases = []
    for _ in range(8):
        got = [sem.acquire(timeout=5) for _ in range(3)]
        leases += got
        for lease in got:
            lease.release()
    _fences_grow_per_record(leases)


def test_semaphore_with_and_async_with(client, other, key):
    sem = client.semaphore(key, 2)
    with sem as a:
        with sem as b:
            assert a.held and b.held and a.key != b.key
            assert other.semaphore(key, 2).try_acquire() is None
        assert not b.held and a.held
    assert not a.held and sem.available() == 2

    async def main():
        async with sem as x:
            async with sem as y:
                assert x.held and y.held and x.key != y.key
                with pytest.raises(leaselock.LockTimeout) as e:
                    await sem.acquire_async(timeout=0.2)
                assert e.value.code == "TIMEOUT"
                with pytest.raises(leaselock.LockTimeout) as e:
                    await sem.acquire_async(timeout=0)
                assert e.value.code == "BUSY"
            assert not y.held
            z = await sem.acquire_async(timeout=5)
            assert z.held
            sem.release()
        assert not x.held and not z.held

    asyncio.run(main())
    assert sem.available() == 2


def test_semaphore_async_waiters_take_turns(client, other, key):
    # More tasks than slots: they wait on the loop (no thread each) and
    # never more than the limit are inside.
    sem = client.semaphore(key, 2, ttl=10)
    state = {"inside": 0, "peak": 0, "done": 0}

    async def one():
        async with sem:
            state["inside"] += 1
            state["peak"] = max(state["peak"], state["inside"])
            await asyncio.sleep(0.01)
            state["inside"] -= 1
            state["done"] += 1

    async def main():
        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(10))), 120)

    asyncio.run(main())
    assert state["done"] == 10 and state["peak"] <= 2
    assert sem.available() == 2


def test_cancelling_an_async_semaphore_wait_takes_no_slot(client, other, key):
    sem = client.semaphore(key, 1)
    held = other.semaphore(key, 1).acquire()

    async def main():
        task = asyncio.ensure_future(sem.acquire_async())
        await asyncio.sleep(0.3)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    time.sleep(0.2)  # a try in flight at the cancellation releases what it got
    assert sem.available() == 0  # only the holder's slot
    held.release()
    assert sem.available() == 1


def test_semaphore_threads_never_more_than_limit(client, key):
    sem = client.semaphore(key, 2, ttl=10)  # one object shared by the threads
    state = {"inside": 0, "peak": 0, "rounds": 0}
    mu = threading.Lock()
    errors = []
    leases = []

    def work():
        try:
            for _ in range(6):
                with sem as lease:
                    with mu:
                        state["inside"] += 1
                        state["peak"] = max(state["peak"], state["inside"])
                        leases.append(lease)
                    time.sleep(0.002)
                    with mu:
                        state["inside"] -= 1
                        state["rounds"] += 1
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors
    assert state["rounds"] == 36 and state["peak"] <= 2
    _fences_grow_per_record(leases)


def _sem_proc(uri, key, inside, peak, mu, rounds):
    # A child process: rounds of a limit-2 semaphore, counting who is inside.
    with leaselock.connect(uri) as c:
        sem = c.semaphore(key, 2, ttl=10)
        for _ in range(rounds):
            with sem:
                with mu:
                    inside.value += 1
                    peak.value = max(peak.value, inside.value)
                time.sleep(0.005)
                with mu:
                    inside.value -= 1


def test_semaphore_processes_never_more_than_limit(uri, key):
    ctx = multiprocessing.get_context("spawn")
    mu = ctx.Lock()
    inside, peak = ctx.Value("i", 0, lock=False), ctx.Value("i", 0, lock=False)
    procs = [ctx.Process(target=_sem_proc, args=(uri, key, inside, peak, mu, 8))
             for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert inside.value == 0 and 1 <= peak.value <= 2


def test_a_lowered_limit_lets_no_new_holder_in(client, other, key):
    wide = client.semaphore(key, 3)
    narrow = other.semaphore(key, 1)
    a, b = wide.acquire(), wide.acquire()
    # Two live under limit 3: the limit-1 object lets nobody in...
    assert narrow.try_acquire() is None and narrow.available() == 0 and narrow.locked()
    a.release()
    # ...while one is live...
    assert narrow.try_acquire() is None
    with pytest.raises(leaselock.LockTimeout):
        narrow.acquire(timeout=0.2)
    # ...and a waiter gets in once none is.
    got = []
    t = threading.Thread(target=lambda: got.append(narrow.acquire(timeout=30)))
    t.start()
    time.sleep(0.2)
    assert not got
    b.release()
    t.join(60)
    assert got and got[0].held
    # The limit-3 object still counts it as one of three.
    assert wide.available() == 2
    c = wide.try_acquire()
    assert c is not None
    got[0].release()
    c.release()


def test_semaphore_min_hold_keeps_the_slot(client, other, key):
    sem = client.semaphore(key, 1, min_hold=30)
    lease = sem.acquire()
    lease.release()
    assert not lease.held
    # Released but inside its min_hold: still counted.
    assert other.semaphore(key, 1).try_acquire() is None
    other.force_release(lease.key)
    assert other.semaphore(key, 1).try_acquire() is not None


def _fair_sem_waiter(uri, key, tag, ready, order):
    # A fair semaphore waiter in a process of its own: says when it waits
    # (the core logs "wait"), then appends its tag once it holds a slot.
    class Ready(logging.Handler):
        def emit(self, record):
            if "waiting" in record.getMessage():
                ready.put(tag)

    log = logging.getLogger("leaselock")
    log.setLevel(logging.DEBUG)
    log.addHandler(Ready())
    with leaselock.connect(uri, label=f"fair-{tag}") as client:
        with client.semaphore(key, 1, ttl=30, fair=True).acquire(timeout=60):
            order.put(tag)
            time.sleep(0.02)


@pytest.mark.slow
def test_fair_semaphore_waiters_in_order_of_arrival(uri, key):
    ctx = multiprocessing.get_context("spawn")
    ready, order = ctx.Queue(), ctx.Queue()
    with leaselock.connect(uri) as holder:
        lease = holder.semaphore(key, 1, fair=True).acquire(timeout=0)
        procs = []
        for tag in "ABCD":
            p = ctx.Process(target=_fair_sem_waiter, args=(uri, key, tag, ready, order))
            p.start()
            procs.append(p)
            assert ready.get(timeout=60) == tag  # waiting before the next starts
            time.sleep(0.005)  # arrivals in one database millisecond go by owner token
        lease.release()
        got = "".join(order.get(timeout=120) for _ in range(4))
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * 4
        assert got == "ABCD"


def test_a_semaphore_held_twice_by_one_thread(client, key):
    sem = client.semaphore(key, 1)
    with sem:
        # A second hold is a second holder: it waits (here: times out)
        # instead of raising, as threading.Semaphore would block.
        with pytest.raises(leaselock.LockTimeout):
            sem.acquire(timeout=0.1)
        assert sem.try_acquire() is None


def test_ctrl_c_stops_a_blocking_semaphore_wait(uri, key, tmp_path):
    script = tmp_path / "wait.py"
    script.write_text(
        "import sys, leaselock\n"
        "c = leaselock.connect(sys.argv[1])\n"
        "print('waiting', flush=True)\n"
        "try:\n"
        "    with c.semaphore(sys.argv[2], 1):\n"
        "        print('acquired', flush=True)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n")
    with leaselock.connect(uri) as holder:
        held = holder.semaphore(key, 1).acquire()
        p = subprocess.Popen([sys.executable, str(script), uri, key], stdout=subprocess.PIPE,
                             text=True)
        assert p.stdout.readline().strip() == "waiting"
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=10)
        assert out.strip() == "interrupted" and p.returncode == 0
        assert held.held
        assert holder.semaphore(key, 1).available() == 0  # the waiter left nothing
        held.release()


# ---- read-write locks ---------------------------------------------------------


def test_readers_share_and_exclude_a_writer(client, other, key, uri):
    rw = client.rwlock(key, ttl=10)
    theirs = other.rwlock(key, ttl=10)
    assert rw.key == key and rw.shared.mode == "shared" and rw.exclusive.mode == "exclusive"
    assert rw.shared.limit is None and rw.exclusive.limit == 1
    readers = [rw.shared.acquire(), rw.shared.try_acquire(), theirs.shared.acquire(timeout=1)]
    assert all(r is not None and r.held for r in readers)
    assert len({r.owner for r in readers}) == 3
    assert all(r.key.startswith(f"{key}/.rw/r/") for r in readers)
    assert rw.exclusive.locked() and not rw.shared.locked()
    # (A third client: this thread holds a shared side through `other`,
    # where an exclusive acquire would wait for itself: RuntimeError.)
    with pytest.raises(RuntimeError, match="held shared by this thread"):
        other.rwlock(key, ttl=10).exclusive.try_acquire()
    third = leaselock.connect(uri)
    writer = third.rwlock(key, ttl=10)
    assert writer.exclusive.try_acquire() is None
    with pytest.raises(leaselock.LockTimeout) as e:
        writer.exclusive.acquire(timeout=0.2)
    assert e.value.code == "TIMEOUT"
    # A writer that timed out let its record go: readers still get in.
    r4 = theirs.shared.try_acquire()
    assert r4 is not None
    for r in readers + [r4]:
        r.release()

    w = writer.exclusive.acquire(timeout=5)
    assert w.key == f"{key}/.rw/w" and w.held
    assert rw.shared.locked() and rw.exclusive.locked()
    # Readers are excluded while a writer holds...
    assert rw.shared.try_acquire() is None
    with pytest.raises(leaselock.LockTimeout) as e:
        rw.shared.acquire(timeout=0.2)
    assert e.value.code == "TIMEOUT"
    with pytest.raises(leaselock.LockTimeout) as e:
        rw.shared.acquire(timeout=0)
    assert e.value.code == "BUSY"
    # ...and so are writers.
    assert rw.exclusive.try_acquire() is None
    # A reader waiting for the writer gets in once it leaves.
    got = []
    t = threading.Thread(target=lambda: got.append(rw.shared.acquire(timeout=30)))
    t.start()
    time.sleep(0.2)
    assert not got
    writer.exclusive.release()
    t.join(60)
    assert got and got[0].held
    got[0].release()
    # Writers get growing fences.
    fences = [w.fence]
    for _ in range(3):
        with rw.exclusive as lease:
            fences.append(lease.fence)
    assert fences == sorted(fences) and len(set(fences)) == 4
    third.close()


def test_with_on_both_sides(client, other, key):
    rw = client.rwlock(key)
    with rw.shared as a:
        with rw.shared as b:
            assert a.held and b.held and a.key != b.key
            assert "held shared here" in repr(rw)
            assert other.rwlock(key).exclusive.try_acquire() is None
        assert a.held and not b.held
    assert not a.held
    with rw.exclusive as w:
        assert w.held and "held exclusive here" in repr(rw)
        assert other.rwlock(key).shared.try_acquire() is None
    assert not w.held
    assert other.rwlock(key).exclusive.try_acquire() is not None


def test_async_on_both_sides(client, other, key):
    rw = client.rwlock(key, ttl=10)
    order = []

    async def reader(i):
        async with rw.shared:
            order.append(f"r{i}+")
            await asyncio.sleep(0.2)
            order.append(f"r{i}-")

    async def writer():
        await asyncio.sleep(0.05)  # after the readers are in
        async with rw.exclusive as w:
            order.append("w+")
            assert w.held and other.rwlock(key).shared.try_acquire() is None
            await asyncio.sleep(0.05)
            order.append("w-")

    async def main():
        await asyncio.wait_for(asyncio.gather(reader(1), reader(2), writer()), 60)
        # Both readers were in at once, the writer after both left.
        assert order.index("r2+") < order.index("r1-")
        assert order.index("w+") > max(order.index("r1-"), order.index("r2-"))
        held = await rw.exclusive.acquire_async(timeout=5)
        with pytest.raises(leaselock.LockTimeout):
            await other.rwlock(key).shared.acquire_async(timeout=0.2)
        with pytest.raises(leaselock.LockTimeout):
            await other.rwlock(key).exclusive.acquire_async(timeout=0)
        rw.exclusive.release()
        assert not held.held
        r = await other.rwlock(key).shared.acquire_async(timeout=5)
        r.release()

    asyncio.run(main())


def test_a_writer_is_not_starved_by_a_stream_of_readers(client, key):
    # Readers come and go so that one is always inside; a writer that asks
    # meanwhile still gets in, and no reader is inside while it is.
    rw = client.rwlock(key, ttl=10)
    stop = threading.Event()
    state = {"readers": 0, "writer": False, "overlap": 0, "reads": 0}
    mu = threading.Lock()
    errors = []

    def reader(delay):
        time.sleep(delay)
        try:
            while not stop.is_set():
                with rw.shared:
                    with mu:
                        state["readers"] += 1
                        state["reads"] += 1
                        state["overlap"] += state["writer"]
                    time.sleep(0.03)
                    with mu:
                        state["readers"] -= 1
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=reader, args=(i * 0.01,)) for i in range(4)]
    for t in ts:
        t.start()
    try:
        deadline = time.monotonic() + 10
        while state["reads"] < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        with rw.exclusive.acquire(timeout=60) as w:
            with mu:
                assert state["readers"] == 0
                state["writer"] = True
            time.sleep(0.05)
            with mu:
                state["writer"] = False
            assert w.held
    finally:
        stop.set()
        for t in ts:
            t.join(60)
    assert not errors and state["overlap"] == 0


def test_no_reentrance_on_the_exclusive_side(client, key):
    rw = client.rwlock(key)
    with rw.exclusive:
        for side in (rw.exclusive, rw.shared):
            with pytest.raises(RuntimeError) as e:
                side.acquire(timeout=0)
            assert str(e.value) == (
                f'"{key}" is held exclusively by this thread through this read-write lock: '
                "it would wait for itself (read-write locks are not reentrant)")
            with pytest.raises(RuntimeError):
                side.try_acquire()
    with rw.shared:
        with rw.shared:  # the shared side: a second holder
            with pytest.raises(RuntimeError) as e:
                rw.exclusive.acquire()
            assert str(e.value) == (
                f'"{key}" is held shared by this thread through this read-write lock: an '
                "exclusive acquire would wait for itself (release the shared hold first)")

    async def main():
        async with rw.exclusive:
            with pytest.raises(RuntimeError, match="by this task"):
                await rw.exclusive.acquire_async()

    asyncio.run(main())
    # Other threads wait their turn as usual.
    with rw.exclusive:
        seen = []
        t = threading.Thread(target=lambda: seen.append(rw.exclusive.try_acquire()))
        t.start()
        t.join()
        assert seen == [None]


# ---- arguments ----------------------------------------------------------------

BAD = [
    ("limit bool", lambda c: c.semaphore("k", True), TypeError, "limit must be an int, not bool"),
    ("limit float", lambda c: c.semaphore("k", 2.0), TypeError,
     "limit must be an int, not float"),
    ("limit str", lambda c: c.semaphore("k", "2"), TypeError, "limit must be an int, not str"),
    ("limit None", lambda c: c.semaphore("k", None), TypeError,
     "limit must be an int, not NoneType"),
    ("limit 0", lambda c: c.semaphore("k", 0), ValueError, "limit must be 1 to 1000 (got 0)"),
    ("limit negative", lambda c: c.semaphore("k", -1), ValueError,
     "limit must be 1 to 1000 (got -1)"),
    ("limit 1001", lambda c: c.semaphore("k", 1001), ValueError,
     "limit must be 1 to 1000 (got 1001)"),
    ("limit huge", lambda c: c.semaphore("k", 10**30), ValueError,
     f"limit must be 1 to 1000 (got {10**30})"),
    ("semaphore key too long", lambda c: c.semaphore("k" * 246, 2), ValueError,
     "key is 246 bytes: a semaphore adds up to 10 bytes to it for its records, so it may "
     "have at most 245"),
    ("rwlock key too long", lambda c: c.rwlock("é" * 109), ValueError,
     "key is 218 bytes: a read-write lock adds up to 39 bytes to it for its records, so it "
     "may have at most 216"),
    ("semaphore key int", lambda c: c.semaphore(1, 2), TypeError, "key must be a str, not int"),
    ("rwlock key empty", lambda c: c.rwlock(""), ValueError, "key must not be empty"),
    ("semaphore ttl", lambda c: c.semaphore("k", 2, ttl=0), ValueError,
     "ttl must be greater than 0"),
    ("rwlock ttl str", lambda c: c.rwlock("k", ttl="1"), TypeError, "ttl must be a number"),
    ("semaphore fair", lambda c: c.semaphore("k", 2, fair=1), TypeError,
     "fair must be a bool, not int"),
    ("rwlock on_lost without renewal", lambda c: c.rwlock("k", auto_renew=False,
                                                          on_lost=print),
     ValueError, "on_lost needs auto_renew=True"),
    ("semaphore timeout", lambda c: c.semaphore("k", 2).acquire(timeout=-1), ValueError,
     "timeout must not be negative"),
    ("rwlock timeout", lambda c: c.rwlock("k").shared.acquire(timeout="1"), TypeError,
     "timeout must be a number"),
]


@pytest.mark.parametrize("what,fn,exc,msg", BAD, ids=[b[0] for b in BAD])
def test_bad_arguments(sqlite_uri, what, fn, exc, msg):
    with leaselock.connect(sqlite_uri) as c:
        with pytest.raises(exc) as e:
            fn(c)
        assert str(e.value).startswith(msg), str(e.value)
        assert type(e.value) is exc and e.value.code == "INVALID"


def test_the_longest_keys_fit(client):
    with client.semaphore("s" * 245, 2) as lease:
        assert lease.key == "s" * 245 + "/.slot/" + lease.key.rsplit("/", 1)[1]
    rw = client.rwlock("r" * 216)
    with rw.shared as r:
        assert len(r.key.encode()) == 255
    with rw.exclusive:
        pass


def test_reentrant_is_not_offered(sqlite_uri):
    with leaselock.connect(sqlite_uri) as c:
        with pytest.raises(TypeError, match="unexpected keyword argument 'reentrant'"):
            c.semaphore("k", 2, reentrant=True)
        with pytest.raises(TypeError, match="unexpected keyword argument 'reentrant'"):
            c.rwlock("k", reentrant=True)
        assert c.semaphore("k", 2).reentrant is False
        assert c.rwlock("k").exclusive.reentrant is False


def test_the_extension_rechecks(sqlite_uri):
    # The package checks first; the core checks again what reaches it.
    with leaselock.connect(sqlite_uri) as c:
        with pytest.raises(ValueError, match=r"limit must be 1 to 1000 \(got 0\)"):
            c._acquire_mode("k", mode="semaphore", limit=0, ttl_ms=1000, timeout_ms=0)
        with pytest.raises(ValueError, match="mode must be 'semaphore', 'shared' or "
                           "'exclusive', not 'read'"):
            c._acquire_mode("k", mode="read", ttl_ms=1000, timeout_ms=0)
        with pytest.raises(TypeError, match="needs the keyword arguments ttl_ms, timeout_ms "
                           "and mode"):
            c._acquire_mode("k", ttl_ms=1000, timeout_ms=0)
        with pytest.raises(TypeError, match="limit must be an int, not bool"):
            c._acquire_mode("k", mode="semaphore", limit=True, ttl_ms=1000, timeout_ms=0)
        with pytest.raises(ValueError, match="at most 245"):
            c._acquire_mode("k" * 250, mode="semaphore", limit=2, ttl_ms=1000, timeout_ms=0)
        with pytest.raises(TypeError, match="unexpected keyword argument 'mode'"):
            c._acquire("k", mode="shared", ttl_ms=1000, timeout_ms=0)


def test_a_closed_client(sqlite_uri):
    c = leaselock.connect(sqlite_uri)
    sem, rw = c.semaphore("k", 2), c.rwlock("k")
    lease = sem.acquire()
    c.close()
    assert lease.state == "released"
    assert "client closed" in repr(sem) and "client closed" in repr(rw)
    for fn in (sem.try_acquire, rw.shared.try_acquire, lambda: rw.exclusive.acquire(timeout=1)):
        with pytest.raises(ValueError, match="closed"):
            fn()
    with pytest.raises(ValueError, match="closed"):
        c.semaphore("k", 2)
