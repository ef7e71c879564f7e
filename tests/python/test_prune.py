"""client.prune(prefix="", older_than=0): deletes the free records under a
prefix (never a live lease, never one kept by min_hold) and returns how
many, on every backend."""
import time

import pytest

import leaselock


def _release(client, key, **kw):
    with client.lock(key, ttl=10, **kw):
        pass


def test_prune_keeps_live_and_min_hold(client, other, key):
    live = client.lock(f"{key}/live", ttl=10).acquire(timeout=5)
    _release(client, f"{key}/hold", min_hold=10)
    _release(client, f"{key}/gone1")
    _release(client, f"{key}/gone2")
    _release(client, f"{key}x/gone")
    assert other.prune(f"{key}/") == 2
    left = [r["key"] for r in other.locks(f"{key}")]
    assert left == [f"{key}/hold", f"{key}/live", f"{key}x/gone"]
    assert live.held
    live.renew()
    assert other.prune(prefix=f"{key}/") == 0
    live.release()
    assert other.prune(f"{key}/") == 1
    # A pruned key starts its fence again at 1.
    with client.lock(f"{key}/gone1") as lease:
        assert lease.fence == 1


@pytest.mark.slow
def test_prune_older_than(client, key):
    _release(client, f"{key}/a")
    time.sleep(1.5)
    _release(client, f"{key}/b")
    time.sleep(0.3)
    assert client.prune(f"{key}/", older_than=5) == 0
    assert client.prune(f"{key}/", older_than=0.9) == 1
    assert [r["key"] for r in client.locks(f"{key}/")] == [f"{key}/b"]
    assert client.prune(f"{key}/", 0) == 1
    assert client.locks(f"{key}/") == []


def test_prune_bad_arguments(sqlite_uri):
    with leaselock.connect(sqlite_uri) as c:
        assert c.prune() == 0
        with pytest.raises(ValueError) as e:
            c.prune(older_than=-1)
        assert e.value.code == "INVALID"
        with pytest.raises(ValueError):
            c.prune(older_than=31 * 86400)
        with pytest.raises(TypeError):
            c.prune(older_than="1s")
        with pytest.raises(TypeError):
            c.prune(1)
        with pytest.raises(ValueError):
            c.prune("a\0b")
        with pytest.raises(TypeError):
            c.prune(bogus=1)
    with pytest.raises(ValueError):
        c.prune()


def test_prune_older_than_timedelta(client, key):
    import datetime

    _release(client, f"{key}/a")
    assert client.prune(f"{key}/", older_than=datetime.timedelta(minutes=5)) == 0
    assert client.prune(f"{key}/", older_than=datetime.timedelta(0)) == 1
    with pytest.raises(TypeError, match="older_than must be a number of seconds "
                       r"\(int or float\) or a datetime.timedelta, not str"):
        client.prune(f"{key}/", older_than="1s")
