"""A thread or asyncio task that holds a key through one lock object of a
client and asks for it through another of the same client gets the same
immediate error as through one object (or re-enters, reentrant=True),
never a wait for itself. Another thread of the process still waits its
turn and gets the key after the release."""
import asyncio
import threading
import time

import pytest

import leaselock


def test_second_lock_object_is_an_error(client, key):
    a = client.lock(key).acquire()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="already held by this thread through another Lock"):
        client.lock(key).acquire(timeout=2)
    with pytest.raises(RuntimeError, match="reentrant=True"):
        with client.lock(key):
            pass
    with pytest.raises(RuntimeError):
        client.lock(key).try_acquire()
    assert time.monotonic() - start < 1.5  # no wait
    assert a.held
    a.release()
    # Released: another object takes it.
    with client.lock(key) as b:
        assert b.fence > a.fence


def test_second_lock_object_reentrant_enters(client, key):
    a = client.lock(key, ttl=30).acquire()
    lock = client.lock(key, ttl=30, reentrant=True)
    inner = lock.acquire(timeout=5)  # bounded: a wait for itself times out
    assert inner is a and a.holds == 2
    assert client.info(key)["holds"] == 2
    lock.release()
    assert a.held and a.holds == 1
    a.release()
    assert client.info(key)["holds"] == 0


def test_other_client_is_another_owner(client, other, key):
    with client.lock(key):
        with pytest.raises(leaselock.LockTimeout):
            other.lock(key).acquire(timeout=0.2)


def test_other_thread_waits_and_gets_it(client, key):
    a = client.lock(key, ttl=30).acquire()
    got = []

    def run():
        lease = client.lock(key, ttl=30).acquire(timeout=20)
        got.append(lease.fence)
        lease.release()

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    assert got == [] and t.is_alive()  # waits: another thread is another holder
    a.release()
    t.join(20)
    assert got and got[0] > a.fence


def test_asyncio_second_object_and_thread_hold(client, key):
    lock = client.lock(key, ttl=30)

    async def same_task():
        async with client.lock(key):
            with pytest.raises(RuntimeError, match="through another Lock"):
                await client.lock(key).acquire_async(timeout=5)

    asyncio.run(same_task())

    # Taken by the thread outside any task: a task of its loop waiting for
    # it would wait for itself.
    lease = lock.try_acquire()
    assert lease is not None

    async def enter():
        async with lock:
            pass

    async def after_try():
        # wait_for runs enter in a task of its own: still this thread's.
        with pytest.raises(RuntimeError, match="through this Lock"):
            await asyncio.wait_for(enter(), 5)
        with pytest.raises(RuntimeError, match="through another Lock"):
            await client.lock(key).acquire_async(timeout=5)

    asyncio.run(after_try())
    lease.release()


def test_asyncio_other_task_waits(client, key):
    async def main():
        order = []

        async def second():
            async with client.lock(key, ttl=30) as lease:
                order.append(("second", lease.fence))

        async with client.lock(key, ttl=30) as first:
            task = asyncio.ensure_future(second())
            await asyncio.sleep(0.5)
            assert not task.done()  # another task is another holder
            order.append(("first", first.fence))
        await asyncio.wait_for(task, 20)
        return order

    order = asyncio.run(main())
    assert [o[0] for o in order] == ["first", "second"] and order[1][1] > order[0][1]


def test_rwlock_second_object(client, key):
    w = client.rwlock(key).exclusive.acquire()
    with pytest.raises(RuntimeError, match="held exclusively by this thread through another"):
        client.rwlock(key).shared.acquire(timeout=2)
    with pytest.raises(RuntimeError, match="another read-write lock"):
        client.rwlock(key).exclusive.acquire(timeout=2)
    w.release()
    r = client.rwlock(key).shared.acquire()
    r2 = client.rwlock(key).shared.acquire(timeout=2)  # readers: holders of their own
    with pytest.raises(RuntimeError, match="held shared by this thread through another"):
        client.rwlock(key).exclusive.acquire(timeout=2)
    r.release()
    r2.release()


def test_semaphore_second_object_is_another_holder(client, key):
    a = client.semaphore(key, 2).acquire()
    b = client.semaphore(key, 2).acquire(timeout=2)  # a slot remains: no self-wait
    assert a.key != b.key
    a.release()
    b.release()


def test_with_blocks_of_two_objects_see_each_other(client, key):
    # `with lock:` notes and checks its holds in the extension (with.c),
    # acquire() and the asyncio paths in _lock.py: each sees the others'.
    a, b = client.lock(key), client.lock(key)
    with a as outer:
        with pytest.raises(RuntimeError, match="through this Lock"):
            with a:
                pass
        with pytest.raises(RuntimeError, match="through another Lock"):
            with b:
                pass
        with pytest.raises(RuntimeError, match="through another Lock"):
            b.acquire(timeout=2)
        assert outer.held
    assert not outer.held
    lease = b.acquire()
    with pytest.raises(RuntimeError, match="through another Lock"):
        with a:
            pass
    lease.release()
    # Taken by the thread outside any task: a task of its event loop holds
    # it too (it would wait for itself).
    with a:
        async def inner():
            with pytest.raises(RuntimeError, match="through this Lock"):
                with a:
                    pass
            with pytest.raises(RuntimeError, match="through another Lock"):
                async with b:
                    pass

        asyncio.run(inner())
    with b:
        pass
