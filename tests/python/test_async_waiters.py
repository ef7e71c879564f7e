"""asyncio waiters cost no OS thread each: many tasks waiting on one lock
use a bounded number of threads (a small shared pool runs the tries, the
waits are on the event loop), all get their turn, and cancelling a waiting
task stops its wait and leaves nothing held."""
import asyncio
import os
import threading

import pytest

import leaselock

N_TASKS = 1000
# The pool that runs the tries and releases (4 threads), the clients'
# renewal and I/O threads, and some slack: far below one per task.
THREAD_BOUND = 12


def _threads():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


async def _many_wait(client, other, key, n, cancel_some):
    """n tasks wait on key held by other; returns (fences in order of
    acquisition, threads before, peak threads while they waited, number
    cancelled)."""
    blocker = other.lock(key)
    held = blocker.acquire()
    lock = client.lock(key, ttl=10)  # one Lock shared by every task
    fences = []

    async def task():
        async with lock as lease:
            fences.append(lease.fence)
            await asyncio.sleep(0)  # a short hold

    base = _threads()
    tasks = [asyncio.create_task(task()) for _ in range(n)]
    peak = base
    for _ in range(10):  # they all wait now
        await asyncio.sleep(0.05)
        peak = max(peak, _threads())
    assert not any(t.done() for t in tasks)
    cancelled = []
    if cancel_some:
        # The first (the one polling the database) and some queued behind it.
        cancelled = [tasks[0], *tasks[1::97]]
        for t in cancelled:
            t.cancel()
        for t in cancelled:
            with pytest.raises(asyncio.CancelledError):
                await t
        assert other.info(key)["owner"] == held.owner  # the cancelled took nothing
    blocker.release()  # through the Lock: the waiting task is told at once

    async def sample():
        nonlocal peak
        while True:
            peak = max(peak, _threads())
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    await asyncio.wait_for(asyncio.gather(*(t for t in tasks if t not in cancelled)), 120)
    sampler.cancel()
    return fences, base, peak, len(cancelled)


def test_a_thousand_waiters_use_few_threads(sqlite_uri, key):
    with leaselock.connect(sqlite_uri) as client, leaselock.connect(sqlite_uri) as other:
        fences, base, peak, _ = asyncio.run(_many_wait(client, other, key, N_TASKS, False))
        print(f"{N_TASKS} waiting tasks: {base} threads before, at most {peak} while waiting")
        assert peak - base <= THREAD_BOUND, (base, peak)
        assert len(fences) == N_TASKS and fences == sorted(set(fences))
        assert other.info(key)["owner"] is None


def test_cancelling_waiters_among_a_thousand(sqlite_uri, key):
    with leaselock.connect(sqlite_uri) as client, leaselock.connect(sqlite_uri) as other:
        fences, base, peak, n_cancelled = asyncio.run(
            _many_wait(client, other, key, N_TASKS, True))
        assert n_cancelled == 12
        assert peak - base <= THREAD_BOUND, (base, peak)
        assert len(fences) == N_TASKS - n_cancelled and fences == sorted(set(fences))
        assert other.info(key)["owner"] is None  # nothing left held


def test_waiters_take_turns_on_every_backend(client, other, key):
    fences, base, peak, n_cancelled = asyncio.run(_many_wait(client, other, key, 50, True))
    assert n_cancelled == 2
    assert len(fences) == 50 - n_cancelled and fences == sorted(set(fences))
    assert other.info(key)["owner"] is None


def test_waiters_in_arrival_order(client, other, key):
    # Tasks of one process waiting on one key get it in the order they
    # asked.
    async def main():
        blocker = other.lock(key)
        blocker.acquire()
        lock = client.lock(key)
        order = []

        async def task(i):
            async with lock:
                order.append(i)

        tasks = []
        for i in range(20):
            tasks.append(asyncio.create_task(task(i)))
            await asyncio.sleep(0.005)
        blocker.release()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(main()) == list(range(20))


def test_a_waiter_times_out_behind_others(client, other, key):
    # Queued behind a task that waits forever, a task with a timeout still
    # gives up in time, with LockTimeout (TIMEOUT) naming the key.
    async def main():
        blocker = other.lock(key)
        blocker.acquire()
        first = asyncio.create_task(client.lock(key).acquire_async())
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(leaselock.LockTimeout) as e:
            await client.lock(key).acquire_async(timeout=0.3)
        assert 0.29 <= loop.time() - t0 < 3
        assert e.value.code == "TIMEOUT"
        assert str(e.value).startswith("timed out after ")
        # the holder named, as the core's own timeouts name it
        assert f'waiting for "{key}" (held by ' in str(e.value)
        assert "(pytest-other), fence 1, expires in " in str(e.value)
        assert e.value.holder.label == "pytest-other"
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        blocker.release()

    asyncio.run(main())
    assert other.info(key)["owner"] is None


@pytest.mark.slow
def test_a_waiter_is_woken_by_a_release_in_another_thread(client, key):
    # A thread of this process releasing through its Lock wakes the task
    # at once, not after its backoff.
    async def main():
        lock = client.lock(key)
        taken, go = threading.Event(), threading.Event()

        def holder():
            with client.lock(key):
                taken.set()
                go.wait(10)

        t = threading.Thread(target=holder)
        t.start()
        taken.wait(10)
        waiter = asyncio.create_task(lock.acquire_async(timeout=30))
        await asyncio.sleep(2.5)  # its backoff has grown to its 1 s cap
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        go.set()
        lease = await waiter
        woke = loop.time() - t0
        lease.release()
        t.join()
        return woke

    assert asyncio.run(main()) < 0.15


def test_close_ends_the_wait(sqlite_uri, key):
    with leaselock.connect(sqlite_uri) as other:
        held = other.lock(key).acquire()
        client = leaselock.connect(sqlite_uri)

        async def main():
            waiters = [asyncio.create_task(client.lock(key).acquire_async()) for _ in range(5)]
            await asyncio.sleep(0.2)
            client.close()
            results = await asyncio.wait_for(
                asyncio.gather(*waiters, return_exceptions=True), 10)
            return results

        results = asyncio.run(main())
        for r in results:
            assert type(r) is ValueError and str(r) == "I/O operation on a closed client"
            assert r.code == "INVALID"
        assert held.held
