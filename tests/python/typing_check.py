"""Checked by mypy --strict (make test-python-typing), never run: the types
the package's API gives its users."""
from datetime import timedelta
from typing import Literal, Optional, assert_type

import leaselock

client = leaselock.connect()
assert_type(client, leaselock.Client)
with leaselock.connect("sqlite:///tmp/x.db") as c:
    assert_type(c, leaselock.Client)
lock = client.lock("k", ttl=timedelta(seconds=5), min_hold=2)
assert_type(lock, leaselock.Lock)
assert_type(lock.acquire(timeout=timedelta(milliseconds=10)), leaselock.Lease)
assert_type(lock.acquire(1.5), leaselock.Lease)
assert_type(lock.try_acquire(), Optional[leaselock.Lease])
assert_type(client.info("k"), Optional[leaselock.LockInfo])
assert_type(client.locks(), list[leaselock.LockInfo])
assert_type(client.locks("jobs/", held=True), list[leaselock.LockInfo])
rec = client.locks()[0]
assert_type(rec["mode"], Literal["lock", "semaphore", "rwlock"])
assert_type(rec["holders"], list[leaselock.Record])
assert_type(rec["held_for"], Optional[float])
assert_type(rec["queued"], Optional[int])
assert_type(rec["fence"], int)
assert_type(rec["owner"], Optional[str])
assert_type(rec["expires_in"], float)
assert_type(rec["holder"].pid, int)
assert_type(rec["holder"].label, Optional[str])
dur = client.durability()
assert_type(dur, leaselock.Durability)
assert_type(dur["level"], Literal["durable", "at-risk", "standalone", "unknown"])
assert_type(dur["primary"], Optional[str])
assert_type(dur["fence_floor"], int)
assert_type(dur["lock_delay"], float)
assert_type(dur["max_ttl"], Optional[float])


@client.locked("k", timeout=0.3)
def job(a: int, *, b: str = "") -> bytes:
    return b""


assert_type(job(1, b="x"), Optional[bytes])


@client.locked("k", raise_on_busy=True)
def strict(a: int) -> bytes:
    return b""


assert_type(strict(1), bytes)


@client.locked("k", timeout=timedelta(seconds=1))
async def ajob(a: int) -> str:
    return ""




@client.locked("k", raise_on_busy=True)
async def astrict(a: int) -> str:
    return ""




async def use() -> None:
    assert_type(await ajob(1), Optional[str])
    assert_type(await astrict(1), str)
    lease = await lock.acquire_async(timeout=timedelta(seconds=1))
    assert_type(lease, leaselock.Lease)
    async with lock as held:
        assert_type(held, leaselock.Lease)
    with lock as held2:
        assert_type(held2, leaselock.Lease)


sem = client.semaphore("k", 3, ttl=timedelta(seconds=5), fair=True)
assert_type(sem, leaselock.Semaphore)
assert_type(sem.limit, int)
assert_type(sem.available(), int)
assert_type(sem.acquire(timeout=1), leaselock.Lease)
assert_type(sem.try_acquire(), Optional[leaselock.Lease])
with sem as slot:
    assert_type(slot, leaselock.Lease)
rw = client.rwlock("k", min_hold=timedelta(seconds=1))
assert_type(rw, leaselock.RWLock)
assert_type(rw.shared, leaselock.RWLockSide)
assert_type(rw.exclusive.limit, Optional[int])
assert_type(rw.exclusive.mode, Literal["shared", "exclusive"])
side: leaselock.Lock = rw.exclusive  # the sides and semaphores are Locks
with rw.exclusive as w:
    assert_type(w, leaselock.Lease)
assert_type(rw.shared.try_acquire(), Optional[leaselock.Lease])


async def use_modes() -> None:
    async with sem as s:
        assert_type(s, leaselock.Lease)
    async with rw.shared as r:
        assert_type(r, leaselock.Lease)
    assert_type(await rw.exclusive.acquire_async(timeout=2), leaselock.Lease)
