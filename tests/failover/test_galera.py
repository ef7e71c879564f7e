"""Failover of a 3-node MariaDB Galera cluster (tests/topology/galera.py):
first the cluster itself, through the mariadb client (a write on one node
is read on the others, the two left after a node is killed or cut off
keep quorum and take writes, the node restored rejoins and has them all),
then leaselock across it: holders on the cluster's multi-host URI contend
for one key while the node they use is killed or cut off; grants go on
on the other nodes, with no double grant and fences that only grow (the
fault suite's history checker).
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

from faultlib import History, Holder, assert_sound  # noqa: E402
from topology import make_topology  # noqa: E402
from topology.mariadb import CLIENT  # noqa: E402

# The longest lease the database grants (max_ttl): the lock-delay after a
# failover, if leaselock applies one on a new Primary component.
LOCK_DELAY = 3.0
# As in test_mariadb.py: LEASELOCK_FAILOVER_URI_OPTIONS replaces them.
URI_OPTIONS = os.environ.get("LEASELOCK_FAILOVER_URI_OPTIONS",
                             "max_ttl=3s&io_timeout=1&connect_timeout=2")
# Grants must go on within this long after the cluster takes writes again:
# the lock-delay plus 2 s, plus slack for a loaded two-core machine.
AVAILABLE_WITHIN = LOCK_DELAY + 2 + 3

HOWS = ["kill", "cut"]
# Failovers in a row per way of failing in the topology's own test
# (make stress raises it: LEASELOCK_FAILOVER_CYCLES=50 is 100 failovers).
CYCLES = int(os.environ.get("LEASELOCK_FAILOVER_CYCLES", "2"))


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    """One cluster for the module (tests/failover/conftest.py's fixture
    takes this one's place once it offers the Galera topology)."""
    topo = make_topology("galera", str(tmp_path_factory.mktemp("galera") / "topo"))
    t0 = time.monotonic()
    topo.start()
    print(f"galera started in {time.monotonic() - t0:.1f} s")
    yield topo
    topo.stop()


@pytest.fixture(autouse=True)
def healthy(topology):
    yield
    if topology.down is not None:
        t0 = time.monotonic()
        topology.restore()
        print(f"restored in {time.monotonic() - t0:.2f} s")


def as_user(topology, node: int, query: str) -> subprocess.CompletedProcess:
    """query as the leaselock user over TCP, straight to node (no proxy),
    with causal reads (wsrep_sync_wait): a read sees every write the
    cluster committed before it."""
    u = urllib.parse.urlsplit(topology.node_uris()[node])
    return subprocess.run([CLIENT, "--no-defaults", "-h", u.hostname, "-P", str(u.port),
                           "-u", u.username, f"-p{u.password}", u.path.lstrip("/"),
                           "-N", "-B", "-e", "SET SESSION wsrep_sync_wait=1; " + query],
                          capture_output=True, text=True, timeout=30)


def rows(topology, node: int, table: str) -> list[str]:
    r = as_user(topology, node, f"SELECT v FROM {table} ORDER BY v")
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_cluster(topology):
    s = topology.settings()
    print(s)
    assert (s["wsrep_cluster_size"], s["wsrep_cluster_status"]) == ("3", "Primary")
    assert s["wsrep_local_state_comment"] == "Synced"
    assert s["read_only"] == "0"
    table = f"t_{uuid.uuid4().hex[:8]}"
    assert as_user(topology, 1, f"CREATE TABLE {table} (v INT PRIMARY KEY); "
                                f"INSERT INTO {table} VALUES (1)").returncode == 0
    assert as_user(topology, 2, f"INSERT INTO {table} VALUES (2)").returncode == 0
    for n in range(3):
        assert rows(topology, n, table) == ["1", "2"]


@pytest.mark.parametrize("how", HOWS)
def test_failover_and_restore_cycles(topology, how):
    """CYCLES failovers in a row: the node the URI lists first among the
    live ones goes; the others keep quorum and take writes; restored, it
    is Synced and has every write."""
    table = f"c_{how}_{uuid.uuid4().hex[:8]}"
    assert as_user(topology, 0, f"CREATE TABLE {table} (v INT PRIMARY KEY)").returncode == 0
    for cycle in range(CYCLES):
        old = topology.primary()
        assert as_user(topology, old, f"INSERT INTO {table} VALUES ({10 * cycle + 1})"
                       ).returncode == 0
        ft = topology.failover(how)
        rest = [n for n in range(3) if n != old]
        assert topology.primary() in rest
        for i, n in enumerate(rest):
            assert as_user(topology, n, f"INSERT INTO {table} VALUES ({10 * cycle + 2 + i})"
                           ).returncode == 0
        t0 = time.monotonic()
        topology.restore()
        print(f"cycle {cycle} ({how}): node{old} out, writes again after "
              f"{ft.promoted - ft.began:.2f} s, rejoined in {time.monotonic() - t0:.2f} s")
        want = rows(topology, rest[0], table)
        assert len(want) == 3 * (cycle + 1)
        assert rows(topology, old, table) == want
        assert topology.nodes[old].status("wsrep_local_state_comment") == "Synced"


def leaselock_uri(topology) -> str:
    """As in test_mariadb.py: the multi-host URI, once leaselock accepts it."""
    uri = topology.uri(**dict(urllib.parse.parse_qsl(URI_OPTIONS)))
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


@pytest.mark.parametrize("how", HOWS)
def test_grants_go_on_after_a_node_fails(topology, how):
    uri = leaselock_uri(topology)
    key = f"failover/galera/{uuid.uuid4().hex[:12]}"
    history = History(key)
    holders = [Holder(name, uri, history) for name in ("A", "B", "C")]
    seconds = 4 + AVAILABLE_WITHIN
    try:
        for i, h in enumerate(holders):
            h.send("loop", key=key, ttl=LOCK_DELAY, seconds=seconds, hold_max=0.05,
                   timeout=2, seed=i)
        time.sleep(2)
        with history.mu:
            before = len(history.grants)
        assert before > 0, "no grant before the failover"
        ft = topology.failover(how)
        counts = [h.reply(wait=seconds + 30) for h in holders]
        with history.mu:
            after = [g["start"] for g in history.grants.values()
                     if g["start"] is not None and g["start"] > ft.promoted]
        print(f"{how}: {before} grants before, {len(after)} after; first after "
              f"{(min(after) - ft.promoted) if after else float('nan'):.2f} s; {counts}")
        assert after, f"no grant in the {seconds - 2:.0f} s after the failover: {counts}"
        assert_sound(history)
    finally:
        for h in holders:
            h.close()
