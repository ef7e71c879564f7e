"""client.durability(): how the database makes a grant survive a failover,
as the core read it at connect; the URI options durability= and max_ttl=
(PostgreSQL, MySQL/MariaDB) and the TTL bound they set."""
import uuid

import pytest

import leaselock

LEVELS = {"durable", "at-risk", "standalone", "unknown"}
SERVERS = ("mysql", "postgresql")  # the backends with max_ttl= and durability=
KEYS = {"level", "policy", "detail", "primary", "fence_floor", "lock_delay", "max_ttl"}


def with_options(uri, **options):
    """uri with options added to its query string."""
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"{uri}{'&' if '?' in uri else '?'}{query}"


def own_table(uri, **options):
    """uri on a table of its own (max_ttl is kept with the table: a test
    that sets it must not change the one the other tests share)."""
    return with_options(uri, table=f"ll_dur_{uuid.uuid4().hex[:12]}", **options)


@pytest.fixture
def server_uri(uri, client):
    if client.backend not in SERVERS:
        pytest.skip("durability= and max_ttl= are options of PostgreSQL and MySQL/MariaDB")
    return uri


def test_the_dict_on_every_backend(client):
    d = client.durability()
    assert type(d) is dict and set(d) == KEYS
    assert d["level"] in LEVELS and d["policy"] == "report"
    assert isinstance(d["detail"], str) and d["detail"]
    assert isinstance(d["fence_floor"], int) and d["fence_floor"] >= 0
    assert isinstance(d["lock_delay"], float) and d["lock_delay"] >= 0.0
    assert d["primary"] is None or (isinstance(d["primary"], str) and d["primary"])
    assert d["max_ttl"] is None or isinstance(d["max_ttl"], float)
    if client.backend == "sqlite":
        assert d == {"level": "standalone", "policy": "report", "detail": d["detail"],
                     "primary": None, "fence_floor": 0, "lock_delay": 0.0, "max_ttl": None}
        assert "SQLite" in d["detail"]
    elif client.backend in SERVERS:
        # The test servers have no replica; the first connect recorded them
        # as the table's primary, which is no failover: no lock-delay.
        assert d["level"] == "standalone" and d["primary"]
        assert d["max_ttl"] == 60.0 and d["lock_delay"] == 0.0
    assert client.durability() == d  # reading it changes nothing


def test_durability_on_a_closed_client(uri):
    c = leaselock.connect(uri)
    c.close()
    with pytest.raises(ValueError, match="closed client") as e:
        c.durability()
    assert e.value.code == "INVALID"


@pytest.mark.parametrize("policy", ["report", "require", "off"])
def test_the_policy_comes_from_the_uri(server_uri, policy):
    with leaselock.connect(with_options(server_uri, durability=policy)) as c:
        assert c.durability()["policy"] == policy


def test_require_refuses_grants_on_a_server_without_a_standby(server_uri, key):
    with leaselock.connect(with_options(server_uri, durability="require")) as c:
        assert c.durability()["level"] == "standalone"
        with pytest.raises(leaselock.BackendError, match="durability=require") as e:
            c.lock(key).try_acquire()
        assert e.value.code == "BACKEND"
    with leaselock.connect(server_uri) as c:
        assert c.info(key) is None  # nothing half-granted


@pytest.mark.parametrize("option, value, says", [
    ("durability", "maybe", 'durability="maybe": expected report, require or off'),
    ("durability", "", 'durability="": expected report, require or off'),
    ("max_ttl", "soon", 'max_ttl="soon": expected a duration from 1s to 30d'),
    ("max_ttl", "500ms", 'max_ttl="500ms": expected a duration from 1s to 30d'),
    ("max_ttl", "31d", 'max_ttl="31d": expected a duration from 1s to 30d'),
])
def test_a_bad_option_is_a_clear_value_error(server_uri, option, value, says):
    with pytest.raises(ValueError) as e:
        with leaselock.connect(with_options(server_uri, **{option: value})) as c:
            c.durability()
    assert says in str(e.value), str(e.value)
    assert e.value.code == "INVALID"


def test_a_ttl_over_max_ttl_is_refused_naming_it(server_uri, key):
    with leaselock.connect(server_uri) as c:
        with pytest.raises(ValueError, match="over this table's max_ttl of 60000 ms") as e:
            c.lock(key, ttl=61).try_acquire()
        assert e.value.code == "INVALID"
        with c.lock(key, ttl=60).acquire(timeout=0) as lease:
            with pytest.raises(ValueError, match="max_ttl"):
                lease.renew(ttl=90)
            assert lease.held and lease.ttl == 60.0
        assert c.info(key)["owner"] is None


def test_max_ttl_is_kept_with_the_table(server_uri, key):
    uri = own_table(server_uri, max_ttl="5s")
    with leaselock.connect(uri) as c:
        assert c.durability()["max_ttl"] == 5.0  # a new table takes the URI's
        with pytest.raises(ValueError, match="max_ttl of 5000 ms"):
            c.lock(key, ttl=6).try_acquire()
        with c.lock(key, ttl=5).acquire(timeout=0):
            pass
    # Later clients can raise it, never lower it: leases granted under the
    # old bound may still be live.
    table = uri.split("table=")[1].split("&")[0]
    lower = with_options(server_uri, table=table, max_ttl="2s")
    with leaselock.connect(lower) as c:
        assert c.durability()["max_ttl"] == 5.0
    higher = with_options(server_uri, table=table, max_ttl="2m")
    with leaselock.connect(higher) as c:
        assert c.durability()["max_ttl"] == 120.0
        with c.lock(key, ttl=90).acquire(timeout=0) as lease:
            assert lease.ttl == 90.0
