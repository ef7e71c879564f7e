"""Checked by mypy --strict (make test-python-typing), never run: the types
the package's API gives its users."""
from datetime import timedelta
from typing import Optional, assert_type

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
assert_type(client.info("k"), Optional[leaselock.Record])
assert_type(client.locks(), list[leaselock.Record])
rec = client.locks()[0]
assert_type(rec["fence"], int)
assert_type(rec["owner"], Optional[str])
assert_type(rec["expires_in"], float)
assert_type(rec["holder"].pid, int)
assert_type(rec["holder"].label, Optional[str])


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
