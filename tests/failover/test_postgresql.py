"""Failover of a PostgreSQL primary with a streaming standby
(tests/topology/postgresql.py): what a holder may rely on when the
primary dies and the standby is promoted.

- asynchronous, the grant not replicated: nobody else is granted the key
  while the old holder's lease may still be live (the lock-delay), and the
  key is available again soon after (lock-delay + 2 s at most);
- fences issued after the failover are larger than every fence the old
  primary issued, replicated or not;
- synchronous with the standby cut off: an acquire ends within the
  caller's timeout with an error that says why, and leaves no grant behind;
- synchronous, a failover: the leases that were replicated survive it;
- the old primary partitioned away (its address accepts connections and
  never answers): clients still reach the new one, the first host's
  connect bounded on its own as libpq bounds it.

The clients use the multi-host URI with max_ttl (conftest.py); every
time is time.monotonic().
"""

from __future__ import annotations

import re
import time

import pytest

import leaselock
from conftest import (CALL_BOUND, LOCK_DELAY, MAX_TTL, UNAVAILABLE_MAX, LossWatch,
                      check_lost_grant, client_uri, first_grant, report, unavailable_for)

@pytest.mark.topologies("pg-async")
@pytest.mark.parametrize("how", ["kill", "cut"])
def test_no_second_holder_while_the_lost_grant_may_live(topology, connect, how, rnd):
    """A's grant never reaches the standby; the primary is killed (or cut
    off) and the standby promoted. B, a new client, must be refused the key until A's
    lease has run out (the lock-delay), then granted within the lock-delay
    + 2 s of the promotion; A learns of its loss by its deadline."""
    uri = client_uri(topology)
    a = connect(uri, "A")
    check_lost_grant(topology, connect, uri, a, "failover/async-grant", how, "pg-async",
                     "standby")


@pytest.mark.topologies("pg-async")
def test_fences_never_go_back(topology, connect, rnd):
    """A takes the key three times (replicated), then a fourth (not
    replicated); the primary dies. B's fence must be larger than every
    fence A got, so that a store that refuses smaller fences refuses A's
    late write."""
    topo = topology
    uri = client_uri(topo)
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
    assert not topo.has_everything(), "the 4th grant reached the standby: the scenario did not run"
    times = topo.failover("kill")
    b = connect(uri, "B")
    t0 = time.monotonic()
    lease_b = b.lock(key, ttl=MAX_TTL).acquire(timeout=UNAVAILABLE_MAX + CALL_BOUND)
    report(f"pg-async: A's fences {fences}; B got fence {lease_b.fence} "
           f"{time.monotonic() - times.promoted:.2f} s after the promotion "
           f"(waited {time.monotonic() - t0:.2f} s)")
    assert fences == sorted(set(fences)), f"A's fences did not grow: {fences}"
    assert lease_b.fence > max(fences), (
        f"fence regression: B got fence {lease_b.fence} after the failover, but the old "
        f"primary had issued {max(fences)} (fences {fences}): a store that refuses smaller "
        "fences accepts both holders' writes")
    lease_b.release()


@pytest.mark.topologies("pg-sync")
def test_sync_standby_cut_off_acquire_ends_in_time(topology, connect, rnd):
    """Synchronous replication, the standby cut off: a commit on the
    primary waits for it. An acquire must end within the caller's timeout
    (not the I/O bounds' 5 + 5 s), with an error that says the grant could
    not be made durable, and leave no holder behind once the standby is
    back."""
    topo = topology
    # Default I/O bounds (io_timeout 5 s): the caller's timeout must win.
    uri = client_uri(topo, bounded=False)
    key = "failover/sync-cut"
    a = connect(uri, "A")
    a.lock("failover/warm-up", ttl=MAX_TTL).acquire(timeout=5).release()
    topo.pause_replication()
    timeout = 2.0
    t0 = time.monotonic()
    outcome = None
    try:
        lease = a.lock(key, ttl=MAX_TTL).acquire(timeout=timeout)
        outcome = f"granted fence {lease.fence}"
    except leaselock.LockError as e:
        outcome = f"{type(e).__name__} ({getattr(e, 'code', None)}): {e}"
        err = e
    took = time.monotonic() - t0
    report(f"pg-sync, standby cut off: acquire(timeout={timeout:g}) ended after {took:.2f} s: "
           f"{outcome}")
    assert took <= timeout + 1.0, (
        f"acquire(timeout={timeout:g}) returned after {took:.2f} s with the standby cut off: "
        f"{outcome}")
    assert not outcome.startswith("granted"), (
        f"acquire succeeded although the standby could not confirm the grant: {outcome}")
    assert re.search(r"standby|synchron|replicat|durab|unknown", str(err), re.I), (
        f"the error does not say why the grant could not be made: {outcome}")
    # With the standby back, the commit that waited completes; the grant
    # it made must be undone (or run out), and A must work again.
    topo.resume_replication()
    back = time.monotonic()
    b = connect(uri, "B")
    lease_b, granted, busy, errors = first_grant(b.lock(key, ttl=MAX_TTL),
                                                 back + MAX_TTL + 2 + CALL_BOUND)
    assert lease_b is not None, f"B never got the key after the standby came back: {errors[-3:]}"
    report(f"pg-sync: the key was free {granted - back:.2f} s after the standby came back")
    lease_b.release()
    a.lock(key, ttl=MAX_TTL).acquire(timeout=5).release()


@pytest.mark.topologies("pg-sync")
def test_sync_replicated_lease_survives_failover(topology, connect, rnd):
    """Synchronous: A's grant was on the standby when the primary died. A
    keeps its lease across the failover (its renewals reach the new
    primary), B is refused while A holds it and granted after A's
    release."""
    topo = topology
    uri = client_uri(topo)
    key = "failover/sync-survives"
    a = connect(uri, "A")
    lost = LossWatch()
    lease_a = a.lock(key, ttl=MAX_TTL, on_lost=lost).acquire(timeout=5)
    times = topo.failover("kill")
    b = connect(uri, "B")
    lock_b = b.lock(key, ttl=MAX_TTL)
    end = times.promoted + 2 * MAX_TTL
    while time.monotonic() < end:
        try:
            got = lock_b.try_acquire()
        except leaselock.LockError:
            got = None
        assert got is None, (
            f"B was granted fence {got.fence} while A still held fence {lease_a.fence} "
            f"({time.monotonic() - times.promoted:.2f} s after the promotion)")
        time.sleep(0.1)
    assert lease_a.held and not lost.at, (
        f"A's replicated lease did not survive the failover (lost at "
        f"{[round(t - times.promoted, 2) for t in lost.at.values()]} s after the promotion)")
    lease_a.release()
    lease_b = lock_b.acquire(timeout=UNAVAILABLE_MAX)
    report(f"pg-sync: A kept its lease {2 * MAX_TTL:g} s past the failover; B got fence "
           f"{lease_b.fence} after A's release")
    assert lease_b.fence > lease_a.fence
    lease_b.release()


@pytest.mark.topologies("pg-async")
def test_clients_reach_the_new_primary_past_a_silent_old_one(topology, connect, rnd):
    """The old primary is partitioned away: its address (the first host of
    the URI) accepts connections and never answers. A new client must
    still reach the new primary (libpq with the same URI does, after
    connect_timeout on the first host), and get a key within the lock-delay
    + 2 s of the promotion."""
    topo = topology
    uri = client_uri(topo)
    assert topo.primary() == 0, "the silent node must be the first host of the URI"
    times = topo.failover("partition")
    give_up = times.promoted + UNAVAILABLE_MAX + CALL_BOUND
    lease, errors = None, []
    while lease is None and time.monotonic() < give_up:
        try:
            b = connect(uri, "B")  # a client connects when made
        except leaselock.LockError as e:
            errors.append(f"{type(e).__name__}: {e}")
            continue
        lease, granted, busy, more = first_grant(b.lock("failover/partition", ttl=MAX_TTL),
                                                 give_up)
        errors += more
    if lease is None:
        pytest.fail(f"no client reached the new primary past the silent old one in "
                    f"{UNAVAILABLE_MAX + CALL_BOUND:g} s ({len(errors)} tries failed; the last: "
                    f"{errors[-1] if errors else None})")
    after = granted - times.promoted
    unavailable_for(topo, after)
    report(f"pg-async: partition failover; a new client got a key {after:.2f} s after the "
           f"promotion ({len(errors)} failed tries before)")
    assert after <= UNAVAILABLE_MAX, (
        f"a new client got a key {after:.2f} s after the promotion (lock-delay "
        f"{LOCK_DELAY:g} s + 2 s allowed)")
    lease.release()
