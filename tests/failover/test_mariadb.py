"""Failover of a MariaDB primary with a semi-synchronous replica
(tests/topology/mariadb.py): first the topology itself, through the
mariadb client (what the primary commits reaches the replica, the replica
refuses writes, the promoted replica takes them, the old primary comes
back as its replica), then leaselock across the failover:

- a grant the replica never received (its replication stopped, so the
  primary's commit goes on without the acknowledgement once the
  semi-sync timeout has passed) is lost by the failover: no other client
  may be granted the key before that lease's holder has lost it, i.e.
  before the lock-delay (the longest lease, max_ttl) has run out;
- fences issued after the failover are larger than any the old primary
  issued for the key, replicated or not.

Each failover runs twice: the primary SIGKILLed, and cut off by its proxy.
The clients run in processes of their own (tests/faults/holder.py), on the
topology's multi-host URI, and every grant goes into the fault suite's
history checker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.parse
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "faults")]

import faultlib  # noqa: E402
from faultlib import History, Holder, assert_sound, wait_for  # noqa: E402
from topology import make_topology  # noqa: E402
from topology.mariadb import CLIENT  # noqa: E402

# The longest lease the database grants, hence the lock-delay after a
# failover (seconds); every lease here asks for it.
LOCK_DELAY = 3.0
# The URI options of every client here: the bound on leases (max_ttl), and
# I/O bounds in step with the short leases. LEASELOCK_FAILOVER_URI_OPTIONS
# replaces them (e.g. without max_ttl, for a leaselock that does not know
# the option yet).
URI_OPTIONS = os.environ.get("LEASELOCK_FAILOVER_URI_OPTIONS",
                             "max_ttl=3s&io_timeout=1&connect_timeout=2")
# How long after the promotion keys may stay unavailable: the lock-delay
# plus 2 s, plus slack for a loaded two-core machine.
AVAILABLE_WITHIN = LOCK_DELAY + 2 + 3

HOWS = ["kill", "cut"]
# Failovers in a row per way of failing in the topology's own test
# (make stress raises it: LEASELOCK_FAILOVER_CYCLES=50 is 100 failovers).
CYCLES = int(os.environ.get("LEASELOCK_FAILOVER_CYCLES", "2"))
# The URI forms of the leaselock tests: "hosts", the multi-host URI that
# leaselock follows to the writable node; "vip", one address that the
# failover moves to the new primary (a virtual IP, a proxy), so that only
# the server behind it tells the client a failover happened.
FORMS = os.environ.get("LEASELOCK_FAILOVER_FORMS", "hosts").split(",")


# ---- the topology ----------------------------------------------------------

@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    """One topology for the module (tests/failover/conftest.py's fixture
    takes this one's place once it offers the MariaDB topology)."""
    topo = make_topology("mariadb-semisync", str(tmp_path_factory.mktemp("mariadb") / "topo"))
    t0 = time.monotonic()
    topo.start()
    print(f"mariadb-semisync started in {time.monotonic() - t0:.1f} s")
    yield topo
    topo.stop()


@pytest.fixture(autouse=True)
def healthy(topology):
    """Every test starts and ends with replication running: a failover a
    test made is restored, replication a test stopped is resumed."""
    yield
    if topology.down is not None:
        t0 = time.monotonic()
        topology.restore()
        print(f"restored in {time.monotonic() - t0:.2f} s")
    topology.resume_replication()


def options() -> dict:
    return dict(urllib.parse.parse_qsl(URI_OPTIONS))


def as_user(topology, node: int, query: str) -> subprocess.CompletedProcess:
    """query as the leaselock user over TCP, straight to node (no proxy)."""
    u = urllib.parse.urlsplit(topology.node_uris()[node])
    return subprocess.run([CLIENT, "--no-defaults", "-h", u.hostname, "-P", str(u.port),
                           "-u", u.username, f"-p{u.password}", u.path.lstrip("/"),
                           "-N", "-B", "-e", query],
                          capture_output=True, text=True, timeout=30)


def rows(topology, node: int, table: str) -> list[str]:
    out = topology.nodes[node].sql(f"SELECT v FROM leaselock_test.{table} ORDER BY v")
    return out.split("\n") if out else []


def test_settings(topology):
    """What the topology promises is what the servers run with."""
    s = topology.settings()
    print(s)
    p, r = s["primary"], s["replica"]
    assert p["rpl_semi_sync_master_enabled"] == "1"
    assert p["rpl_semi_sync_master_wait_point"] == "AFTER_SYNC"
    assert p["Rpl_semi_sync_master_status"] == "ON"
    assert r["rpl_semi_sync_slave_enabled"] == "1" and r["Rpl_semi_sync_slave_status"] == "ON"
    assert r["Using_Gtid"] == "Slave_Pos"
    for n in (p, r):
        assert (n["log_bin"], n["binlog_format"], n["log_slave_updates"]) == ("1", "ROW", "1")
        assert n["gtid_strict_mode"] == "1"
    assert p["server_id"] != r["server_id"]
    assert (p["read_only"], r["read_only"]) == ("0", "1")


def test_replica_follows_and_refuses_writes(topology):
    p, r = topology.primary(), topology.replica()
    table = f"t_{uuid.uuid4().hex[:8]}"
    assert as_user(topology, p, f"CREATE TABLE {table} (v INT PRIMARY KEY); "
                                f"INSERT INTO {table} VALUES (1)").returncode == 0
    topology.wait_replicated()
    assert rows(topology, r, table) == ["1"]
    w = as_user(topology, r, f"INSERT INTO {table} VALUES (2)")
    assert w.returncode != 0 and "read-only" in w.stderr, w.stderr
    assert rows(topology, r, table) == ["1"]


@pytest.mark.parametrize("how", HOWS)
def test_failover_and_restore_cycles(topology, how):
    """CYCLES failovers in a row, each after a commit the replica never
    got: the new primary has what was replicated, not the lost commit,
    and takes writes; the old primary, restored, has the new primary's
    data (its own lost commit gone) and is a read-only replica again."""
    table = f"c_{how}_{uuid.uuid4().hex[:8]}"
    topology.nodes[topology.primary()].sql(f"CREATE TABLE leaselock_test.{table} "
                                           "(v INT PRIMARY KEY)")
    for cycle in range(CYCLES):
        old = topology.primary()
        base = 100 * cycle
        assert as_user(topology, old, f"INSERT INTO {table} VALUES ({base + 1})").returncode == 0
        topology.wait_replicated()
        topology.stop_replication()
        assert as_user(topology, old, f"INSERT INTO {table} VALUES ({base + 2})").returncode == 0
        ft = topology.failover(how)
        new = topology.primary()
        assert new != old
        assert str(base + 2) not in rows(topology, new, table)
        assert str(base + 1) in rows(topology, new, table)
        assert as_user(topology, new, f"INSERT INTO {table} VALUES ({base + 3})").returncode == 0
        t0 = time.monotonic()
        topology.restore()
        print(f"cycle {cycle} ({how}): promoted in {ft.promoted - ft.began:.2f} s, "
              f"restored in {time.monotonic() - t0:.2f} s")
        topology.wait_replicated()
        assert rows(topology, old, table) == rows(topology, new, table)
        assert str(base + 2) not in rows(topology, old, table)
        w = as_user(topology, old, f"INSERT INTO {table} VALUES ({base + 4})")
        assert w.returncode != 0 and "read-only" in w.stderr, w.stderr
        assert topology.settings()["primary"]["Rpl_semi_sync_master_status"] == "ON"


def test_failover_without_divergence(topology):
    """A failover after which the old primary has nothing the new one
    lacks: it follows again without being rebuilt."""
    table = f"n_{uuid.uuid4().hex[:8]}"
    old = topology.primary()
    assert as_user(topology, old, f"CREATE TABLE {table} (v INT PRIMARY KEY); "
                                  f"INSERT INTO {table} VALUES (1)").returncode == 0
    topology.wait_replicated()
    topology.failover("kill")
    new = topology.primary()
    assert as_user(topology, new, f"INSERT INTO {table} VALUES (2)").returncode == 0
    topology.restore()
    topology.wait_replicated()
    assert rows(topology, old, table) == ["1", "2"]


# ---- leaselock across the failover -----------------------------------------

def leaselock_uri(topology, form: str) -> str:
    """The topology's URI in that form, after checking in this process
    that leaselock accepts it: until it knows host lists (and max_ttl),
    the tests below fail here, with leaselock's own message."""
    uri = topology.uri(**options()) if form == "hosts" else topology.vip_uri(**options())
    try:
        import leaselock
    except ImportError as e:
        pytest.fail(f"the Python extension is not built or not on PYTHONPATH: {e}")
    refused = None
    try:
        leaselock.connect(uri, label="failover-check").close()
    except ValueError as e:
        refused = str(e)
    if refused:
        pytest.fail(f"leaselock refuses the failover URI: {refused}")
    return uri


def grants_of(history: History, who: str) -> list[dict]:
    with history.mu:
        return sorted((dict(g) for g in history.grants.values()
                       if g["who"] == who and g["start"] is not None), key=lambda g: g["start"])


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("how", HOWS)
def test_unreplicated_grant_waits_the_lock_delay(topology, how, form, tmp_path):
    uri = leaselock_uri(topology, form)
    key = f"failover/mariadb/{uuid.uuid4().hex[:12]}"
    history = History(key)
    a = Holder("A", uri, history)
    b = Holder("B", uri, history)
    try:
        topology.stop_replication()
        r = a.call("acquire", key=key, ttl=LOCK_DELAY, timeout=10)
        assert r["ok"], r
        assert not topology.replicated(), "A's grant reached the replica"
        ft = topology.failover(how)
        r = b.call("acquire", key=key, ttl=LOCK_DELAY, timeout=AVAILABLE_WITHIN, wait=60)
        assert r["ok"], f"B was not granted the key within {AVAILABLE_WITHIN} s: {r}"
        gb = grants_of(history, "B")[-1]
        print(f"{how}: A's grant at {grants_of(history, 'A')[-1]['start'] - ft.began:+.2f} s, "
              f"B granted {gb['start'] - ft.promoted:.2f} s after the promotion")
        # A still believes it holds the key until its local deadline; it
        # must learn of the loss by then (renewals on the new primary).
        wait_for(lambda: a.call("state")["held"] is False, LOCK_DELAY + 5, "A to lose its lease")
        assert b.call("release")["ok"]
        assert_sound(history)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("how", HOWS)
def test_fences_grow_across_failover(topology, how, form, tmp_path):
    uri = leaselock_uri(topology, form)
    key = f"failover/mariadb/{uuid.uuid4().hex[:12]}"
    history = History(key)
    store = str(tmp_path / "fenced-store")
    a = Holder("A", uri, history)
    b = Holder("B", uri, history)
    try:
        fences = []
        for _ in range(3):
            r = a.call("acquire", key=key, ttl=LOCK_DELAY, timeout=10)
            assert r["ok"], r
            fences.append(r["fence"])
            assert a.call("release")["ok"]
        topology.wait_replicated()
        topology.stop_replication()
        r = a.call("acquire", key=key, ttl=LOCK_DELAY, timeout=10)
        assert r["ok"], r
        fences.append(r["fence"])
        assert a.call("write", path=store)["accepted"]
        assert a.call("release")["ok"]
        assert not topology.replicated(), "A's last grant reached the replica"
        topology.failover(how)
        r = b.call("acquire", key=key, ttl=LOCK_DELAY, timeout=AVAILABLE_WITHIN, wait=60)
        assert r["ok"], r
        assert r["fence"] > max(fences), (
            f"fence {r['fence']} after the failover, the old primary issued {fences}")
        w = b.call("write", path=store)
        assert w["accepted"], f"the fenced store refused B's fence {w['fence']} (seen {w['seen']})"
        assert b.call("release")["ok"]
        assert_sound(history)
    finally:
        a.close()
        b.close()

