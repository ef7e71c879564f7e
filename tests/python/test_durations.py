"""Durations are seconds (int or float) or datetime.timedelta, everywhere a
duration is taken; anything else is a clear TypeError or ValueError with
.code "INVALID"."""
import asyncio
import math
from datetime import timedelta

import pytest

import leaselock


@pytest.fixture
def c(sqlite_uri):
    with leaselock.connect(sqlite_uri) as client:
        yield client


NUMBER_OR_TIMEDELTA = "must be a number of seconds (int or float) or a datetime.timedelta"


def test_timedelta_ttl_and_min_hold(c, key):
    lock = c.lock(key, ttl=timedelta(seconds=90), min_hold=timedelta(milliseconds=1500))
    assert lock.ttl == 90.0 and lock.min_hold == 1.5
    with lock as lease:
        assert lease.ttl == 90.0
    # min_hold keeps the released record busy for about 1.5 s
    assert 0 < c.info(key)["expires_in"] <= 1.5
    assert c.lock(key).try_acquire() is None


def test_timedelta_and_number_give_the_same_lock(c, key):
    a = c.lock(key, ttl=timedelta(minutes=2), min_hold=timedelta(0))
    b = c.lock(key, ttl=120, min_hold=0)
    assert (a.ttl, a.min_hold) == (b.ttl, b.min_hold) == (120.0, 0.0)


def test_timedelta_timeouts(c, key):
    holder = leaselock.connect(c.uri)  # another owner
    held = holder.lock(key).acquire()
    with pytest.raises(leaselock.LockTimeout) as e:
        c.lock(key).acquire(timeout=timedelta(milliseconds=200))
    assert e.value.code == "TIMEOUT"
    with pytest.raises(leaselock.LockTimeout) as e:
        c.lock(key).acquire(timeout=timedelta(0))
    assert e.value.code == "BUSY"

    @c.locked(key, ttl=timedelta(seconds=5), timeout=timedelta(milliseconds=100),
              min_hold=timedelta(0))
    def job():
        return "ran"

    assert job() is None

    async def main():
        with pytest.raises(leaselock.LockTimeout) as e:
            await c.lock(key).acquire_async(timeout=timedelta(milliseconds=200))
        assert e.value.code == "TIMEOUT"

    asyncio.run(main())
    held.release()
    holder.close()
    assert job() == "ran"
    lease = c.lock(key).acquire(timeout=timedelta(seconds=1))
    lease.release()


def test_renew_takes_a_timedelta(c, key):
    lease = c.lock(key, ttl=5).acquire()
    lease.renew(timedelta(minutes=1))
    assert lease.ttl == 60.0 and 55 < c.info(key)["expires_in"] <= 60
    lease.renew(ttl=timedelta(seconds=20))
    assert lease.ttl == 20.0
    lease.renew(7.5)
    assert lease.ttl == 7.5
    lease.renew()  # keeps its TTL
    assert lease.ttl == 7.5
    for bad, exc, msg in [
        (timedelta(0), ValueError, "ttl must be greater than 0 (got 0 s)"),
        (timedelta(seconds=-1), ValueError, "ttl must not be negative (got -1 s)"),
        (timedelta(days=31), ValueError, "ttl must be at most 30 days"),
        ("5", TypeError, f"ttl {NUMBER_OR_TIMEDELTA} or None, not str"),
        (True, TypeError, f"ttl {NUMBER_OR_TIMEDELTA} or None, not bool"),
    ]:
        with pytest.raises(exc) as e:
            lease.renew(bad)
        assert type(e.value) is exc and str(e.value).startswith(msg), str(e.value)
        assert e.value.code == "INVALID"
    assert lease.held and lease.ttl == 7.5
    lease.release()


def test_renew_shows_the_extensions_signature():
    import inspect

    assert leaselock.Lease.renew.__name__ == "renew"
    assert "ttl" in inspect.signature(leaselock.Lease.renew).parameters
    assert "ttl" in leaselock.Lease.renew.__doc__
    assert leaselock.Lease.renew.__doc__.endswith("Durations may also be datetime.timedelta.")


def test_timedelta_sub_millisecond(c, key):
    # As with numbers: a timeout or min_hold under 1 ms rounds up to 1 ms,
    # a TTL under 1 ms is refused.
    assert c.lock(key, min_hold=timedelta(microseconds=400)).min_hold == 0.001
    lease = c.lock(key).acquire(timeout=timedelta(microseconds=400))
    lease.release()
    with pytest.raises(ValueError) as e:
        c.lock(key, ttl=timedelta(microseconds=500))
    assert str(e.value) == "ttl must be at least 0.001 s (1 ms), got 0.0005 s"
    assert e.value.code == "INVALID"


BAD = [
    ("ttl str", lambda c: c.lock("k", ttl="30s"), TypeError,
     f"ttl {NUMBER_OR_TIMEDELTA}, not str"),
    ("ttl bool", lambda c: c.lock("k", ttl=True), TypeError, f"ttl {NUMBER_OR_TIMEDELTA}, not bool"),
    ("ttl None", lambda c: c.lock("k", ttl=None), TypeError,
     f"ttl {NUMBER_OR_TIMEDELTA}, not NoneType"),
    ("ttl zero timedelta", lambda c: c.lock("k", ttl=timedelta(0)), ValueError,
     "ttl must be greater than 0 (got 0 s)"),
    ("ttl negative timedelta", lambda c: c.lock("k", ttl=timedelta(seconds=-1)), ValueError,
     "ttl must not be negative (got -1 s)"),
    ("ttl timedelta over 30 days", lambda c: c.lock("k", ttl=timedelta(days=31)), ValueError,
     "ttl must be at most 30 days (2592000 s), got 2.6784e+06 s"),
    ("ttl timedelta.max", lambda c: c.lock("k", ttl=timedelta.max), ValueError,
     "ttl must be at most 30 days"),
    ("min_hold negative timedelta", lambda c: c.lock("k", min_hold=timedelta(milliseconds=-5)),
     ValueError, "min_hold must not be negative (got -0.005 s)"),
    ("min_hold list", lambda c: c.lock("k", min_hold=[1]), TypeError,
     f"min_hold {NUMBER_OR_TIMEDELTA}, not list"),
    ("min_hold None", lambda c: c.lock("k", min_hold=None), TypeError,
     f"min_hold {NUMBER_OR_TIMEDELTA}, not NoneType"),
    ("timeout negative timedelta", lambda c: c.lock("k").acquire(timeout=timedelta(days=-1)),
     ValueError, "timeout must not be negative (got -86400 s)"),
    ("timeout str", lambda c: c.lock("k").acquire(timeout="5"), TypeError,
     f"timeout {NUMBER_OR_TIMEDELTA} or None, not str"),
    ("timeout NaN", lambda c: c.lock("k").acquire(timeout=math.nan), ValueError,
     "timeout must be a number of seconds, not NaN"),
    ("async timeout bytes", lambda c: asyncio.run(c.lock("k").acquire_async(timeout=b"1")),
     TypeError, f"timeout {NUMBER_OR_TIMEDELTA} or None, not bytes"),
    ("async timeout negative timedelta",
     lambda c: asyncio.run(c.lock("k").acquire_async(timeout=timedelta(seconds=-2))),
     ValueError, "timeout must not be negative (got -2 s)"),
    ("decorator timeout str", lambda c: c.locked("k", timeout="1"), TypeError,
     f"timeout {NUMBER_OR_TIMEDELTA} or None, not str"),
    ("decorator ttl negative timedelta", lambda c: c.locked("k", ttl=timedelta(seconds=-3)),
     ValueError, "ttl must not be negative (got -3 s)"),
    ("decorator min_hold over 30 days", lambda c: c.locked("k", min_hold=timedelta(days=40)),
     ValueError, "min_hold must be at most 30 days"),
    ("Lock ttl complex", lambda c: leaselock.Lock(c, "k", ttl=1j), TypeError,
     f"ttl {NUMBER_OR_TIMEDELTA}, not complex"),
]


@pytest.mark.parametrize("what,fn,exc,msg", BAD, ids=[b[0] for b in BAD])
def test_bad_durations(c, what, fn, exc, msg):
    with pytest.raises(exc) as e:
        fn(c)
    assert type(e.value) is exc
    assert str(e.value).startswith(msg), str(e.value)
    assert e.value.code == "INVALID"
