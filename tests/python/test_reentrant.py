"""Reentrant locks: the holder (thread or asyncio task) enters again and
gets the same lease and fence; each release lets one hold go; the record
counts the holds. Without reentrant=True a second acquire is an error,
never a wait for oneself."""
import asyncio
import threading

import pytest

import leaselock


def test_reentrant_with_blocks(client, other, key):
    lock = client.lock(key, ttl=30, reentrant=True)
    assert lock.reentrant is True
    with lock as outer:
        assert outer.holds == 1
        with lock as inner:
            assert inner is outer and inner.fence == outer.fence
            assert outer.holds == 2
            assert client.info(key)["holds"] == 2
            again = lock.acquire(timeout=0)
            assert again is outer and outer.holds == 3
            lock.release()
            assert outer.holds == 2
        assert outer.held and outer.holds == 1
        assert other.lock(key).try_acquire() is None  # still held
        assert other.info(key)["holds"] == 1
    assert not outer.held
    assert client.info(key)["holds"] == 0
    lease = other.lock(key).acquire(timeout=0)
    assert lease.fence > outer.fence
    lease.release()


def test_reentrant_other_thread_waits(client, key):
    lock = client.lock(key, ttl=30, reentrant=True)
    with lock:
        got = []
        t = threading.Thread(target=lambda: got.append(lock.try_acquire()))
        t.start()
        t.join(30)
        assert got == [None]  # another thread is another holder


def test_reentrant_asyncio(client, key):
    lock = client.lock(key, ttl=30, reentrant=True)

    async def main():
        async with lock as outer:
            async with lock as inner:
                assert inner is outer and outer.holds == 2
            assert outer.held and outer.holds == 1
            lease = await lock.acquire_async(timeout=0)
            assert lease is outer and outer.holds == 2
            lock.release()
        return outer

    outer = asyncio.run(main())
    assert not outer.held


def test_not_reentrant_is_an_error(client, key):
    lock = client.lock(key, ttl=30)
    with lock:
        with pytest.raises(RuntimeError) as e:
            lock.acquire(timeout=5)
        assert "pass reentrant=True to enter it again" in str(e.value)
        assert e.value.code == "INVALID"


def test_reentrant_bad_argument(client, key):
    with pytest.raises(TypeError) as e:
        client.lock(key, reentrant="yes")
    assert str(e.value) == "reentrant must be a bool, not str"
