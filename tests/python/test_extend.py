"""lease.renew(ttl, min_hold=...): extending a lease can also extend its
minimum hold (ShedLock's extend(lockAtMostFor, lockAtLeastFor)), counted
from the renew, on every backend."""
import time

import pytest

import leaselock


def test_renew_extends_min_hold(client, other, key):
    lease = client.lock(key, ttl=10).acquire(timeout=5)
    time.sleep(0.3)
    lease.renew(min_hold=3)
    lease.release()
    left = other.info(key)["expires_in"]
    # 3 s from the renew, not from the acquire before it.
    assert 2.0 < left <= 3.1
    assert other.lock(key).try_acquire() is None


def test_renew_never_shortens_min_hold(client, other, key):
    lease = client.lock(key, ttl=10, min_hold=3).acquire(timeout=5)
    lease.renew(4, min_hold=0)
    assert lease.ttl == 4
    lease.release()
    assert 2.0 < other.info(key)["expires_in"] <= 3.0


@pytest.mark.parametrize("bad, exc, message", [
    (-1, ValueError, "min_hold"),
    ("1s", TypeError, "min_hold"),
    (float("nan"), ValueError, "min_hold"),
])
def test_renew_bad_min_hold(client, key, bad, exc, message):
    with client.lock(key, ttl=10) as lease:
        with pytest.raises(exc, match=message) as e:
            lease.renew(min_hold=bad)
        assert isinstance(e.value, exc)
        assert lease.held


def test_renew_min_hold_as_timedelta(client, other, key):
    import datetime

    lease = client.lock(key, ttl=10).acquire(timeout=5)
    lease.renew(datetime.timedelta(seconds=8), min_hold=datetime.timedelta(seconds=3))
    assert lease.ttl == 8
    lease.release()
    assert 2.0 < other.info(key)["expires_in"] <= 3.1
