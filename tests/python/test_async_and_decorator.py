"""asyncio (with plain asyncio.run) and the @client.locked decorator."""
import asyncio
import threading
import time

import pytest

import leaselock


def test_async_with(client, other, key):
    async def main():
        lock = client.lock(key)
        async with lock as lease:
            assert lease.held
            assert other.lock(key).try_acquire() is None
        assert not lease.held
        lease = await lock.acquire_async(timeout=1)
        assert lease.held
        lock.release()
        return lease

    lease = asyncio.run(main())
    assert other.info(key)["owner"] is None and not lease.held


def test_async_tasks_take_turns(client, key):
    async def main():
        lock = client.lock(key)  # one Lock shared by the tasks
        order = []

        async def task(i):
            for _ in range(3):
                async with lock as lease:
                    order.append(lease.fence)
                    await asyncio.sleep(0.005)

        await asyncio.gather(*(task(i) for i in range(4)))
        return order

    order = asyncio.run(main())
    assert len(order) == 12 and order == sorted(order) and len(set(order)) == 12


def test_async_timeout(client, other, key):
    held = other.lock(key).acquire()

    async def main():
        with pytest.raises(leaselock.LockTimeout) as e:
            await client.lock(key).acquire_async(timeout=0.2)
        assert e.value.code == "TIMEOUT"
        with pytest.raises(leaselock.LockTimeout) as e:
            await client.lock(key).acquire_async(timeout=0)
        assert e.value.code == "BUSY"

    asyncio.run(main())
    held.release()


def test_async_cancel_stops_the_wait(client, other, key):
    held = other.lock(key).acquire()

    async def main():
        task = asyncio.create_task(client.lock(key).acquire_async())
        await asyncio.sleep(0.2)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # No thread was left waiting: the wait is the task's own.
        assert not [t for t in threading.enumerate() if t.name.startswith("leaselock-acquire")]

    asyncio.run(main())
    held.release()
    time.sleep(0.2)
    assert other.info(key)["owner"] is None  # nobody took it after the cancel


def test_async_wait_for_timeout_cancels(client, other, key):
    held = other.lock(key).acquire()

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(client.lock(key).acquire_async(), 0.2)

    asyncio.run(main())
    held.release()
    time.sleep(0.3)
    assert other.info(key)["owner"] is None


def test_async_acquire_completing_after_cancel_is_released(client, other, key):
    async def main():
        task = asyncio.create_task(client.lock(key).acquire_async())
        await asyncio.sleep(0)  # the task starts its worker thread
        # Block the event loop until the worker has the lease in the
        # database: its result cannot be delivered before the cancel.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            rec = other.info(key)
            if rec and rec["owner"]:
                break
            time.sleep(0.005)
        assert rec and rec["owner"]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        deadline = time.monotonic() + 10
        while other.info(key)["owner"] and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    asyncio.run(main())
    assert other.info(key)["owner"] is None  # released, not leaked
    lease = other.lock(key).try_acquire()
    assert lease is not None
    lease.release()


def test_async_lost_raises_at_exit(client, other, key):
    lost = threading.Event()

    async def main():
        with pytest.raises(leaselock.LockLost):
            async with client.lock(key, ttl=0.6, on_lost=lambda lease: lost.set()):
                other.force_release(key)
                thief = other.lock(key).acquire(timeout=5)
                while not lost.is_set():
                    await asyncio.sleep(0.02)
        thief.release()

    asyncio.run(main())


def test_locked_decorator_runs_and_skips(client, other, key):
    calls = []

    @client.locked(key, ttl=10)
    def job(x):
        calls.append(x)
        assert other.lock(key).try_acquire() is None  # held while it runs
        return x * 2

    assert job(21) == 42 and calls == [21]
    assert job.__name__ == "job"
    held = other.lock(key).acquire()
    assert job(1) is None and calls == [21]  # busy: skipped
    held.release()
    assert job(2) == 4


def test_locked_decorator_raise_on_busy(client, other, key):
    @client.locked(key, raise_on_busy=True)
    def job():
        return "ran"

    held = other.lock(key).acquire()
    with pytest.raises(leaselock.LockTimeout) as e:
        job()
    assert e.value.code == "BUSY"

    @client.locked(key, timeout=0.2, raise_on_busy=True)
    def job2():
        return "ran"

    with pytest.raises(leaselock.LockTimeout) as e:
        job2()
    assert e.value.code == "TIMEOUT"
    held.release()
    assert job() == "ran" and job2() == "ran"


def test_locked_decorator_releases_on_exception(client, other, key):
    @client.locked(key)
    def job():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        job()
    assert other.info(key)["owner"] is None


def test_locked_decorator_async(client, other, key):
    @client.locked(key)
    async def job():
        await asyncio.sleep(0.01)
        return "ran"

    async def main():
        assert await job() == "ran"
        held = other.lock(key).acquire()
        assert await job() is None
        held.release()

    asyncio.run(main())


def test_async_acquire_delivered_just_before_cancel_is_released(client, other, key):
    # The worker thread delivers the lease, then the task is cancelled
    # before it resumes: `await` raises CancelledError with the lease in
    # the future's result. It must be released, not leaked.
    async def main():
        loop = asyncio.get_running_loop()
        lock = client.lock(key)
        box = {"delivered": 0}
        real = loop.call_soon_threadsafe

        def call_soon_threadsafe(cb, *args, **kwargs):
            if getattr(cb, "__name__", "") != "deliver":
                return real(cb, *args, **kwargs)

            def deliver_then_cancel(*a):
                # On the loop, right after the result is set and before the
                # task resumes (queueing the cancel from the worker thread
                # instead would race the loop).
                cb(*a)
                box["delivered"] += 1
                box["task"].cancel()

            return real(deliver_then_cancel, *args, **kwargs)

        loop.call_soon_threadsafe = call_soon_threadsafe
        try:
            box["task"] = task = asyncio.create_task(lock.acquire_async(timeout=5))
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            del loop.call_soon_threadsafe
        assert box["delivered"] == 1
        assert other.info(key)["owner"] is None  # released before the cancel propagated
        assert "not held here" in repr(lock)
        lease = await lock.acquire_async(timeout=0)
        lock.release()
        return lease

    lease = asyncio.run(main())
    assert not lease.held and other.info(key)["owner"] is None


def test_a_new_task_does_not_inherit_an_ended_tasks_lease(client, other, key):
    # Like threads, tasks are not told apart by id(): a new task may get
    # the address of one that ended holding a lease through the Lock.
    import gc

    async def main():
        lock = client.lock(key)
        kept = []

        async def first():
            kept.append(await lock.acquire_async())
            return id(asyncio.current_task())

        async def later():
            with pytest.raises(leaselock.NotHeld):
                lock.release()
            assert "not held here" in repr(lock)
            return id(asyncio.current_task())

        first_id = await asyncio.create_task(first())
        for _ in range(20):  # in CPython the address comes back within a few tasks
            gc.collect()
            reused = await asyncio.create_task(later()) == first_id
            assert kept[0].held and other.info(key)["owner"] == kept[0].owner
            if reused:
                break
        kept.pop().release()

    asyncio.run(main())
    assert other.info(key)["owner"] is None


# A positive timeout without raise_on_busy skips the call too (returns None)
# once the lock stayed busy that long; with raise_on_busy it raises
# LockTimeout (code TIMEOUT).
def test_locked_decorator_positive_timeout_skips(client, other, key):
    calls = []

    @client.locked(key, timeout=0.3)
    def job(x):
        calls.append(x)
        return x

    held = other.lock(key).acquire()
    t0 = time.monotonic()
    assert job(1) is None and calls == []
    assert time.monotonic() - t0 >= 0.29  # it waited the timeout first
    held.release()
    assert job(2) == 2 and calls == [2]


def test_locked_decorator_positive_timeout_raises(client, other, key):
    @client.locked(key, timeout=0.3, raise_on_busy=True)
    def job():
        return "ran"

    held = other.lock(key).acquire()
    with pytest.raises(leaselock.LockTimeout) as e:
        job()
    assert e.value.code == "TIMEOUT"
    assert str(e.value).startswith("timed out after ")
    assert key in str(e.value)
    held.release()
    assert job() == "ran"


def test_locked_decorator_positive_timeout_gets_the_lock_freed_meanwhile(client, other, key):
    @client.locked(key, timeout=5)
    def job():
        return "ran"

    held = other.lock(key).acquire()
    threading.Timer(0.2, held.release).start()
    assert job() == "ran"


def test_locked_decorator_async_positive_timeout(client, other, key):
    @client.locked(key, timeout=0.3)
    async def job():
        return "ran"

    @client.locked(key, timeout=0.3, raise_on_busy=True)
    async def strict():
        return "ran"

    async def main():
        held = other.lock(key).acquire()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await job() is None
        assert loop.time() - t0 >= 0.29
        with pytest.raises(leaselock.LockTimeout) as e:
            await strict()
        assert e.value.code == "TIMEOUT"
        assert str(e.value).startswith("timed out after ") and key in str(e.value)
        held.release()
        assert await job() == "ran" and await strict() == "ran"

    asyncio.run(main())
