"""A busy or timed-out acquire names the key's holder as the CLI does
(`held by HOST pid N (LABEL), fence F, expires in 29.7s`), in the message
and as LockTimeout.holder / .fence / .expires_in, sync and asyncio; a
semaphore's names none (no one holder)."""
import asyncio
import os
import socket

import pytest

import leaselock


def _held_by(lease):
    return (f"held by {socket.gethostname()} pid {os.getpid()} (pytest), "
            f"fence {lease.fence}, expires in ")


def _check(e, lease):
    assert e.holder == leaselock.Holder(socket.gethostname(), os.getpid(), "pytest")
    assert e.holder.label == "pytest"
    assert e.fence == lease.fence
    assert 0 < e.expires_in <= 30


def test_timeout_names_holder(client, other, key):
    lease = client.lock(key, ttl=30).acquire()
    with pytest.raises(leaselock.LockTimeout) as ei:
        other.lock(key).acquire(timeout=0.1)
    e = ei.value
    assert e.code == "TIMEOUT"
    assert f'waiting for "{key}" ({_held_by(lease)}' in str(e)
    _check(e, lease)
    lease.release()


def test_busy_one_try_names_holder(client, other, key):
    lease = client.lock(key, ttl=30).acquire()
    with pytest.raises(leaselock.LockTimeout) as ei:
        other.lock(key).acquire(timeout=0)
    e = ei.value
    assert e.code == "BUSY"
    assert str(e).startswith(f'"{key}" is {_held_by(lease)}')
    _check(e, lease)
    before = other.stats()["requests"]
    assert other.lock(key).try_acquire() is None  # unchanged: None, no error,
    assert other.stats()["requests"] == before + 1  # and no read for a holder
    before = other.stats()["requests"]
    with pytest.raises(leaselock.LockTimeout):
        other.lock(key).acquire(timeout=0)
    assert other.stats()["requests"] == before + 2  # the try, the one read

    @other.locked(key, timeout=0, raise_on_busy=True)
    def job():
        pass

    with pytest.raises(leaselock.LockTimeout) as ei:
        job()
    _check(ei.value, lease)
    lease.release()


def test_asyncio_names_holder(client, other, key):
    lease = client.lock(key, ttl=30).acquire()

    async def main():
        with pytest.raises(leaselock.LockTimeout) as busy:
            await other.lock(key).acquire_async(timeout=0)
        with pytest.raises(leaselock.LockTimeout) as late:
            await other.lock(key).acquire_async(timeout=0.1)
        return busy.value, late.value

    busy, late = asyncio.run(main())
    assert busy.code == "BUSY" and late.code == "TIMEOUT"
    assert _held_by(lease) in str(busy) and _held_by(lease) in str(late)
    _check(busy, lease)
    _check(late, lease)
    lease.release()


def test_min_hold_and_modes(client, other, key):
    client.lock(key, min_hold=30).acquire().release()
    with pytest.raises(leaselock.LockTimeout, match="released but kept by min_hold of") as ei:
        other.lock(key).acquire(timeout=0)
    assert ei.value.fence == 1 and ei.value.holder.pid == os.getpid()
    sem = client.semaphore(key + "/s", limit=1).acquire()
    with pytest.raises(leaselock.LockTimeout) as ei:
        other.semaphore(key + "/s", limit=1).acquire(timeout=0)
    assert ei.value.holder is None and ei.value.fence is None and ei.value.expires_in is None
    sem.release()
