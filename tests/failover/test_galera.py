"""Failover of a 3-node MariaDB Galera cluster (tests/topology/galera.py):
first the cluster itself, through the mariadb client (a write on one node
is read on the others; the two left after a node is killed or cut off
keep quorum and take writes; the node restored rejoins and has them all),
then leaselock across it: holders in processes of their own
(tests/faults/holder.py), on the cluster's multi-host URI, contend for one
key while the node they use is killed or cut off. Grants go on on the
other nodes, with no double grant and fences that only grow (the fault
suite's history checker).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.parse
import uuid

import pytest

from conftest import MAX_TTL, UNAVAILABLE_MAX, client_uri, report, unavailable_for
from topology.mariadb import CLIENT

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "faults"))
from faultlib import History, Holder, assert_sound  # noqa: E402

pytestmark = pytest.mark.topologies("galera")

HOWS = ["kill", "cut"]
# Failovers each way in the cluster's own test (make stress's rounds
# repeat it).
CYCLES = int(os.environ.get("LEASELOCK_FAILOVER_CYCLES", "1"))
# The contention's length after each failover: grants must resume within
# the lock-delay + 2 s, and go on.
AFTER = UNAVAILABLE_MAX + 3


def as_user(topo, node: int, query: str) -> subprocess.CompletedProcess:
    """query as the leaselock user over TCP, straight to node (no proxy),
    with causal reads (wsrep_sync_wait): a read sees every write the
    cluster committed before it."""
    u = urllib.parse.urlsplit(topo.node_uris()[node])
    return subprocess.run([CLIENT, "--no-defaults", "-h", u.hostname, "-P", str(u.port),
                           "-u", u.username, f"-p{u.password}", u.path.lstrip("/"),
                           "-N", "-B", "-e", "SET SESSION wsrep_sync_wait=1; " + query],
                          capture_output=True, text=True, timeout=30)


def rows(topo, node: int, table: str) -> list[str]:
    r = as_user(topo, node, f"SELECT v FROM {table} ORDER BY v")
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_cluster_keeps_quorum_and_rejoins(topology, rnd):
    topo = topology
    s = topo.settings()
    report(f"galera settings: {s}")
    assert (s["wsrep_cluster_size"], s["wsrep_cluster_status"]) == ("3", "Primary")
    assert s["wsrep_local_state_comment"] == "Synced" and s["read_only"] == "0"
    table = f"t_{uuid.uuid4().hex[:8]}"
    assert as_user(topo, 1, f"CREATE TABLE {table} (v INT PRIMARY KEY); "
                            f"INSERT INTO {table} VALUES (1)").returncode == 0
    assert as_user(topo, 2, f"INSERT INTO {table} VALUES (2)").returncode == 0
    for n in range(3):
        assert rows(topo, n, table) == ["1", "2"]
    for cycle, how in enumerate(HOWS * CYCLES):
        old = topo.primary()
        assert as_user(topo, old, f"INSERT INTO {table} VALUES ({10 * cycle + 11})"
                       ).returncode == 0
        ft = topo.failover(how)
        rest = [n for n in range(3) if n != old]
        assert topo.primary() in rest
        for i, n in enumerate(rest):
            assert as_user(topo, n, f"INSERT INTO {table} VALUES ({10 * cycle + 12 + i})"
                           ).returncode == 0
        t0 = time.monotonic()
        topo.restore()
        report(f"galera cycle {cycle}: {how} node{old}: writes again after "
               f"{ft.promoted - ft.began:.3f} s, rejoined (Synced) in "
               f"{time.monotonic() - t0:.3f} s")
        want = rows(topo, rest[0], table)
        assert len(want) == 2 + 3 * (cycle + 1)
        assert rows(topo, old, table) == want
        assert topo.nodes[old].status("wsrep_local_state_comment") == "Synced"


def test_grants_go_on_after_a_node_fails(topology, rnd):
    """Three holders take turns on one key while the node the URI lists
    first is killed, then (restored) cut off."""
    topo = topology
    uri = client_uri(topo)
    key = f"failover/galera/{uuid.uuid4().hex[:12]}"
    history = History(key)
    holders = [Holder(name, uri, history) for name in ("A", "B", "C")]
    try:
        for how in HOWS:
            before = 1.5
            for i, h in enumerate(holders):
                h.send("loop", key=key, ttl=MAX_TTL, seconds=before + AFTER, hold_max=0.05,
                       timeout=2, seed=i)
            time.sleep(before)
            with history.mu:
                n_before = len(history.grants)
            ft = topo.failover(how)
            counts = [h.reply(wait=before + AFTER + 30) for h in holders]
            with history.mu:
                after = sorted(g["start"] for g in history.grants.values()
                               if g["start"] is not None and g["start"] > ft.promoted)
            assert after, f"{how}: no grant in the {AFTER:g} s after the failover: {counts}"
            unavailable_for(topo, after[0] - ft.promoted)
            report(f"galera: {how} failover {ft.promoted - ft.began:.3f} s; {n_before} grants "
                   f"before, {len(after)} after, the first {after[0] - ft.promoted:.2f} s after "
                   f"the cluster took writes; {counts}")
            assert after[0] - ft.promoted <= UNAVAILABLE_MAX, (
                f"{how}: the key was unavailable {after[0] - ft.promoted:.2f} s after the "
                "cluster took writes (lock-delay + 2 s allowed)")
            assert_sound(history)
            topo.restore()
    finally:
        for h in holders:
            h.close()
