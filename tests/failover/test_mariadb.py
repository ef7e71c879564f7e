"""Failover of a MariaDB primary with a semi-synchronous replica
(tests/topology/mariadb.py): first the topology itself, through the
mariadb client (the settings in force, what the primary commits reaches
the replica, the replica refuses writes, the promoted replica takes them,
the old primary comes back as its replica without what it alone had),
then what a holder may rely on:

- a grant the replica never received (its replication stopped: the
  primary's commit goes on without the acknowledgement once the semi-sync
  timeout has passed) is lost with the old primary: nobody else is
  granted the key while the old holder's lease may still be live (the
  lock-delay), and the key is available again within the lock-delay
  + 2 s of the promotion;
- fences issued after the failover are larger than every fence the old
  primary issued, replicated or not.

The clients use the multi-host URI with max_ttl (conftest.py); the form
"vip" gives them one address that the failover moves to the new primary
(a virtual IP, a proxy), so that only the server behind it says a
failover happened. Every time is time.monotonic().
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.parse
import uuid

import pytest

from conftest import (CALL_BOUND, MAX_TTL, UNAVAILABLE_MAX, check_lost_grant, client_uri,
                      report)
from topology.mariadb import CLIENT

pytestmark = pytest.mark.topologies("mariadb-semisync")

# Failovers each way in the topology's own test (make stress's rounds
# repeat it).
CYCLES = int(os.environ.get("LEASELOCK_FAILOVER_CYCLES", "1"))


def uri_of(topo, form: str) -> str:
    """The clients' URI: conftest's multi-host one ("hosts"), or its
    options on the address that follows the primary ("vip")."""
    uri = client_uri(topo)
    if form == "hosts":
        return uri
    return topo.vip_uri(**dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(uri).query)))


def as_user(topo, node: int, query: str) -> subprocess.CompletedProcess:
    """query as the leaselock user over TCP, straight to node (no proxy)."""
    u = urllib.parse.urlsplit(topo.node_uris()[node])
    return subprocess.run([CLIENT, "--no-defaults", "-h", u.hostname, "-P", str(u.port),
                           "-u", u.username, f"-p{u.password}", u.path.lstrip("/"),
                           "-N", "-B", "-e", query],
                          capture_output=True, text=True, timeout=30)


def rows(topo, node: int, table: str) -> list[str]:
    out = topo.nodes[node].sql(f"SELECT v FROM leaselock_test.{table} ORDER BY v")
    return out.split("\n") if out else []


def test_replication(topology, rnd):
    """The settings the topology promises are the ones in force; the
    replica applies what the primary commits and refuses writes."""
    topo = topology
    s = topo.settings()
    report(f"mariadb-semisync settings: {s}")
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
    table = f"t_{uuid.uuid4().hex[:8]}"
    assert as_user(topo, topo.primary(), f"CREATE TABLE {table} (v INT PRIMARY KEY); "
                                         f"INSERT INTO {table} VALUES (1)").returncode == 0
    topo.wait_replicated()
    assert rows(topo, topo.replica(), table) == ["1"]
    w = as_user(topo, topo.replica(), f"INSERT INTO {table} VALUES (2)")
    assert w.returncode != 0 and "read-only" in w.stderr, w.stderr
    assert rows(topo, topo.replica(), table) == ["1"]


def test_failovers_drop_what_the_replica_never_got(topology, rnd):
    """Failovers each way, each after a commit the replica never got: the
    new primary has what was replicated, not that commit, and takes
    writes; the old primary, restored, has the new primary's data (its
    own lost commit gone), is read-only and semi-sync is on again. Then a
    failover with nothing lost: the old primary follows without a
    rebuild."""
    topo = topology
    table = f"c_{uuid.uuid4().hex[:8]}"
    topo.nodes[topo.primary()].sql(f"CREATE TABLE leaselock_test.{table} (v INT PRIMARY KEY)")
    for cycle, how in enumerate(["kill", "cut"] * CYCLES):
        old = topo.primary()
        base = 100 * cycle
        assert as_user(topo, old, f"INSERT INTO {table} VALUES ({base + 1})").returncode == 0
        topo.wait_replicated()
        topo.pause_replication()
        assert as_user(topo, old, f"INSERT INTO {table} VALUES ({base + 2})").returncode == 0
        assert not topo.has_everything(), "the replica got the commit: the scenario did not run"
        ft = topo.failover(how)
        new = topo.primary()
        assert new != old
        assert str(base + 2) not in rows(topo, new, table)
        assert str(base + 1) in rows(topo, new, table)
        assert as_user(topo, new, f"INSERT INTO {table} VALUES ({base + 3})").returncode == 0
        t0 = time.monotonic()
        topo.restore()
        report(f"mariadb-semisync cycle {cycle}: {how} failover {ft.promoted - ft.began:.3f} s, "
               f"restore (rebuilt) {time.monotonic() - t0:.3f} s")
        topo.wait_replicated()
        assert rows(topo, old, table) == rows(topo, new, table)
        assert str(base + 2) not in rows(topo, old, table)
        w = as_user(topo, old, f"INSERT INTO {table} VALUES ({base + 4})")
        assert w.returncode != 0 and "read-only" in w.stderr, w.stderr
        assert topo.settings()["primary"]["Rpl_semi_sync_master_status"] == "ON"
    old = topo.primary()
    assert as_user(topo, old, f"INSERT INTO {table} VALUES (1000)").returncode == 0
    topo.wait_replicated()
    topo.failover("kill")
    assert as_user(topo, topo.primary(), f"INSERT INTO {table} VALUES (1001)").returncode == 0
    t0 = time.monotonic()
    topo.restore()
    report(f"mariadb-semisync: restore (not rebuilt) {time.monotonic() - t0:.3f} s")
    topo.wait_replicated()
    assert rows(topo, old, table)[-2:] == ["1000", "1001"]


@pytest.mark.parametrize("how,form", [("kill", "hosts"), ("cut", "hosts"), ("kill", "vip")])
def test_no_second_holder_while_the_lost_grant_may_live(topology, connect, how, form, rnd):
    """A's grant never reaches the replica; the primary is killed (or cut
    off) and the replica promoted. B, a new client, must be refused the
    key until A's lease has run out (the lock-delay), then be granted it
    within the lock-delay + 2 s of the promotion; A learns of its loss by
    its deadline."""
    topo = topology
    uri = uri_of(topo, form)
    a = connect(uri, "A")
    check_lost_grant(topo, connect, uri, a, "failover/unreplicated-grant", how,
                     f"mariadb-semisync ({form})", "replica")


@pytest.mark.parametrize("how,form", [("kill", "hosts"), ("cut", "vip")])
def test_fences_never_go_back(topology, connect, how, form, rnd):
    """A takes the key three times (replicated), then a fourth (not
    replicated); the primary goes. B's fence must be larger than every
    fence A got."""
    topo = topology
    uri = uri_of(topo, form)
    key = "failover/fences"
    a = connect(uri, "A")
    lock_a = a.lock(key, ttl=MAX_TTL)
    fences = []
    for _ in range(3):
        lease = lock_a.acquire(timeout=5)
        fences.append(lease.fence)
        lease.release()
    topo.wait_replicated()
    topo.pause_replication()
    fourth = lock_a.acquire(timeout=5)
    fences.append(fourth.fence)
    assert not topo.has_everything(), "the 4th grant reached the replica: the scenario did not run"
    times = topo.failover(how)
    b = connect(uri, "B")
    lease_b = b.lock(key, ttl=MAX_TTL).acquire(timeout=UNAVAILABLE_MAX + CALL_BOUND)
    report(f"mariadb-semisync ({form}): {how}: A's fences {fences}; B got fence {lease_b.fence} "
           f"{time.monotonic() - times.promoted:.2f} s after the promotion")
    assert fences == sorted(set(fences)), f"A's fences did not grow: {fences}"
    assert lease_b.fence > max(fences), (
        f"fence regression: B got fence {lease_b.fence} after the failover, but the old "
        f"primary had issued {max(fences)} (fences {fences})")
    lease_b.release()
