"""The topologies themselves (tests/topology/base.py), on every kind:
repeated failovers, each way, with a restore after each; the same client
follows the primary, and a new client finds it through the multi-host URI.
Prints what a start, a failover and a restore took."""

from __future__ import annotations

import time

import pytest

import leaselock
from conftest import UNAVAILABLE_MAX, client_uri, report, unavailable_for

CYCLES = ("kill", "cut", "kill")


def test_failover_cycles(topology, connect, rnd):
    topo = topology
    uri = client_uri(topo)
    assert len(topo.node_uris()) >= 2
    old = connect(uri, "steady")
    old.lock("cycles/warm-up", ttl=3).acquire(timeout=5).release()
    for i, how in enumerate(CYCLES):
        primary = topo.primary()
        times = topo.failover(how)
        assert times.how == how and times.began <= times.promoted
        assert topo.primary() != primary, f"{how}: the primary is still node {primary}"
        # A new client, then the one that knew the old primary, each take
        # a key of their own (bounded: a lock-delay may hold it back).
        took = {}
        for who, c in (("new", connect(uri, "new")), ("steady", old)):
            try:
                lease = c.lock(f"cycles/{i}/{who}", ttl=3).acquire(timeout=UNAVAILABLE_MAX + 5)
            except leaselock.LockError as e:
                pytest.fail(f"cycle {i} ({how}): the {who} client got no lease after the "
                            f"failover: {e}")
            took[who] = time.monotonic() - times.promoted
            lease.release()
            if who == "new":
                unavailable_for(topo, took[who])
        t0 = time.monotonic()
        topo.restore()
        restored = time.monotonic() - t0
        report(f"{topo.name} cycle {i}: {how} failover {times.promoted - times.began:.3f} s, "
               f"restore {restored:.3f} s, leases "
               f"{took['new']:.2f} s (a new client) and {took['steady']:.2f} s (the steady one) "
               "after the promotion; "
               f"primary {primary} -> {topo.primary()}")
