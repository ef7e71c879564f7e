"""Fair mode: waiters in other processes get the key in order of arrival,
through the blocking wait and the asyncio wait alike; a one-try acquire
defers to queued waiters."""
import asyncio
import logging
import multiprocessing
import time

import pytest

import leaselock

N = 4


def _waiter(uri, key, tag, use_async, ready, order):
    # A fair waiter in a process of its own: says when it is queued (its
    # first try found the key busy: the core logs "wait"), then appends
    # its tag once it holds the key.
    class Ready(logging.Handler):
        def emit(self, record):
            if "waiting" in record.getMessage():
                ready.put(tag)

    log = logging.getLogger("leaselock")
    log.setLevel(logging.DEBUG)
    log.addHandler(Ready())
    client = leaselock.connect(uri, label=f"fair-{tag}")
    lock = client.lock(key, ttl=30, fair=True)
    if use_async:
        async def main():
            async with lock:
                order.put(tag)
                await asyncio.sleep(0.02)
        asyncio.run(main())
    else:
        with lock.acquire(timeout=60):
            order.put(tag)
            time.sleep(0.02)
    client.close()


def _run_in_order(uri, key, use_async):
    ctx = multiprocessing.get_context("spawn")
    ready, order = ctx.Queue(), ctx.Queue()
    holder = leaselock.connect(uri, label="fair-holder")
    lock = holder.lock(key, ttl=60, fair=True)
    lease = lock.acquire(timeout=0)
    procs = []
    try:
        for i in range(N):
            tag = chr(ord("A") + i)
            p = ctx.Process(target=_waiter, args=(uri, key, tag, use_async, ready, order))
            p.start()
            procs.append(p)
            assert ready.get(timeout=60) == tag  # queued before the next starts
            time.sleep(0.005)  # arrivals in one database millisecond go by owner token
        lease.release()
        assert lock.try_acquire() is None  # the waiters are queued first
        got = "".join(order.get(timeout=120) for _ in range(N))
    finally:
        for p in procs:
            p.join(120)
        holder.close()
    assert [p.exitcode for p in procs] == [0] * N
    return got


@pytest.mark.slow
def test_fair_order_processes(uri, key):
    assert _run_in_order(uri, key, use_async=False) == "ABCD"


@pytest.mark.slow
def test_fair_order_asyncio_processes(uri, key):
    assert _run_in_order(uri, key, use_async=True) == "ABCD"


def test_fair_one_try_defers(client, other, key):
    lock = client.lock(key, fair=True)
    assert lock.fair is True
    lease = lock.acquire(timeout=0)
    waiting = other.lock(key, fair=True)

    async def wait_for_it():
        return await waiting.acquire_async(timeout=30)

    async def main():
        task = asyncio.ensure_future(wait_for_it())
        await asyncio.sleep(0.3)  # the waiter is queued
        await asyncio.get_running_loop().run_in_executor(None, lease.release)
        mine = await asyncio.get_running_loop().run_in_executor(None, lock.try_acquire)
        got = await task
        return mine, got

    mine, got = asyncio.run(main())
    assert mine is None
    assert got.held
    got.release()


def test_fair_bad_argument(client, key):
    with pytest.raises(TypeError) as e:
        client.lock(key, fair=1)
    assert str(e.value) == "fair must be a bool, not int"
