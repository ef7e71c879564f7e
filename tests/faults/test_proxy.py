"""Network faults through Toxiproxy on the server backends (MongoDB,
MariaDB, PostgreSQL). Holder A reaches the server through proxy a, holder
B through proxy b. Each scenario has three phases:

1. hold: A holds the key, the fault hits A's path only, B keeps trying.
   A must report the loss by its local deadline, and B's grants must start
   after it; the fault is then removed.
2. contention: A and B take turns on the key with the fault on both paths
   (on a share of the connections), holds sometimes past the TTL.
3. recovery: with the faults gone, the same clients (no new ones) take the
   key, hold it past the TTL (renewal works) and release it.
The grant history of all three phases is checked at the end.
"""
import time

from conftest import CALL_BOUND
from faultlib import assert_sound


def hold_phase(e, a, b, ttl, fault, expect_loss, seconds=None, bounded_call=False):
    r = a.call("acquire", key=e.key, ttl=ttl, timeout=5)
    assert r["ok"], r
    fence = r["fence"]
    fault(e.pa)
    if bounded_call:
        # A call of A's on the faulty path ends within its I/O bounds.
        t0 = time.monotonic()
        r = a.call("acquire", key=e.key + "/other", ttl=ttl, timeout=0.2, wait=CALL_BOUND + 5)
        took = time.monotonic() - t0
        assert took < CALL_BOUND, f"a call on a silent connection took {took:.1f} s"
        assert not r["ok"] and r["err"] == "BACKEND", r
    # B keeps trying until it has had the key a few times (A's loss), or
    # for `seconds` when A may keep it.
    b.send("loop", key=e.key, ttl=ttl, seconds=seconds or 2 * ttl + 8, hold_max=0.05, timeout=0,
           seed=1, stop_after=None if seconds else 3)
    rb = b.reply(wait=60)
    e.pa.clear()
    # A's release reports what A knows: released, or the loss.
    r = a.call("release", wait=60)
    if expect_loss:
        assert fence in a.lost, f"A's on_lost did not run: release said {r}"
        assert not r["ok"] and r["err"] in ("NOT_HELD", "LOST"), r
        assert rb["grants"] > 0, f"B never got the key after A's loss: {rb}"
    return rb


def contention_phase(e, a, b, ttl, fault, seconds=2.0, hold_max=None):
    fault(e.pa)
    fault(e.pb)
    hold_max = hold_max if hold_max is not None else 1.3 * ttl
    a.send("loop", key=e.key, ttl=ttl, seconds=seconds, hold_max=hold_max, timeout=ttl, seed=2)
    b.send("loop", key=e.key, ttl=ttl, seconds=seconds, hold_max=hold_max, timeout=ttl, seed=3)
    ra, rb = a.reply(wait=60), b.reply(wait=60)
    e.pa.clear()
    e.pb.clear()
    return ra, rb


def recovery_phase(e, a, b, ttl):
    for h in (a, b):
        r = h.call("recover", key=e.key, ttl=ttl, hold=1.2 * ttl, timeout=3 * ttl + 10,
                   store=e.store, wait=60)
        assert r["ok"], f"{h.name} after the fault: {r['why']}"


def test_latency(server, rnd):
    """200 ms each way (400 ms a round trip) against a 1 s TTL: renewals
    barely fit. Holders may lose leases; none may overlap another, and
    every loss is reported by its deadline."""
    e, ttl = server, 1.0
    a, b = e.holder("A", "a"), e.holder("B", "b")

    def slow(p, toxicity=1.0):
        p.toxic("latency", "upstream", toxicity, latency=200, jitter=20)
        p.toxic("latency", "downstream", toxicity, latency=200, jitter=20)

    hold_phase(e, a, b, ttl, slow, expect_loss=False, seconds=1.0)
    contention_phase(e, a, b, ttl, slow, seconds=2.0)
    recovery_phase(e, a, b, ttl)
    assert_sound(e.history)


def test_blackhole(server, rnd):
    """A's connections go silent: Toxiproxy's timeout toxic drops every byte
    A sends and leaves the connections open (its own close comes after 10
    minutes). A's renewal hangs, so A must declare the loss at its local
    deadline on its own; B gets the key only afterwards. The requests are
    gone for good, so A's same client works again only if its I/O is
    bounded: the hung call must end and the connection be replaced.
    Contention: a share of the connections stalled, closed after 300 ms."""
    e, ttl = server, 0.6
    a, b = e.holder("A", "a"), e.holder("B", "b")

    def silence(p):
        p.toxic("timeout", "upstream", timeout=600000)

    hold_phase(e, a, b, ttl, silence, expect_loss=True, bounded_call=True)

    def stall(p):
        p.toxic("timeout", "upstream", 0.3, timeout=300)

    contention_phase(e, a, b, ttl, stall)
    recovery_phase(e, a, b, ttl)
    assert_sound(e.history)


def test_paused(server, rnd):
    """A's requests held back (the timeout toxic with timeout 0 keeps the
    bytes and delivers them when it is removed): A's renewal reaches the
    database long after its deadline, its reply arrives later still. A must
    have reported the loss at its deadline, the late renewal must not
    revive it, and B's grants in between stand."""
    e, ttl = server, 0.6
    a, b = e.holder("A", "a"), e.holder("B", "b")

    def pause(p):
        p.toxic("timeout", "upstream", timeout=0)

    hold_phase(e, a, b, ttl, pause, expect_loss=True)
    recovery_phase(e, a, b, ttl)
    assert_sound(e.history)


def test_reset_peer(server, rnd):
    """Every connection of A reset (RST) as soon as data flows: renewals
    fail, the loss is reported by the deadline. Contention: half of the
    connections reset after a random short time."""
    e, ttl = server, 0.6
    a, b = e.holder("A", "a"), e.holder("B", "b")

    def reset(p):
        p.toxic("reset_peer", "upstream", timeout=0)

    hold_phase(e, a, b, ttl, reset, expect_loss=True)

    def flaky(p):
        p.toxic("reset_peer", "upstream", 0.3, timeout=150)

    contention_phase(e, a, b, ttl, flaky)
    recovery_phase(e, a, b, ttl)
    assert_sound(e.history)


def test_reply_cut(server, rnd):
    """Replies cut mid-way (limit_data: the connection closes after `cut`
    bytes from the server), so a renew or an acquire may apply in the
    database while its reply is lost. Contention: connections cut after a
    few hundred bytes, at any point of a reply."""
    e, ttl, cut = server, 0.6, 7
    a, b = e.holder("A", "a"), e.holder("B", "b")

    def cutoff(p):
        p.toxic("limit_data", "downstream", bytes=cut)

    hold_phase(e, a, b, ttl, cutoff, expect_loss=True)

    def sometimes(p):
        p.toxic("limit_data", "downstream", 0.5, bytes=200 + 97 * cut)

    contention_phase(e, a, b, ttl, sometimes)
    recovery_phase(e, a, b, ttl)
    assert_sound(e.history)

    # An acquire whose replies are all cut (its first send and its resend
    # may both have applied) must not leave the key to an owner nobody
    # holds until its TTL: B gets it within a few seconds, not 30.
    orphan = e.key + "/orphan"
    r = a.call("acquire", key=orphan + "/warm", ttl=ttl, timeout=5)  # a pooled connection
    assert r["ok"], r
    a.call("release")
    cutoff(e.pa)
    r = a.call("acquire", key=orphan, ttl=30, timeout=0, wait=CALL_BOUND + 5)
    e.pa.clear()
    if r["ok"]:
        a.call("release")
    else:
        assert r["err"] == "BACKEND", r
        rb = b.call("loop", key=orphan, ttl=ttl, seconds=5, hold_max=0, timeout=0, seed=4,
                    stop_after=1, wait=30)
        assert rb["grants"] == 1, ("after an acquire that failed on cut replies the key stays "
                                   f"blocked by its owner for the TTL: {rb}")


def test_server_unreachable_or_restarted(server, rnd):
    """The server goes away mid-hold and comes back: the SQL servers are
    restarted for real (LEASELOCK_*_RESTART), down for 2 s longer than a
    restart takes in even rounds (the lease is lost during the outage),
    restarted at once in odd rounds (it may survive); mongo-java-server keeps its
    records in memory, so a restart would forget the fences: it is cut off
    instead (both proxies disabled: connections closed, new ones refused)
    for as long as a restart takes. A keeps the key if it renews in time,
    otherwise reports the loss by its deadline; B gets the key only after
    that; both clients work again afterwards."""
    import os
    import subprocess

    from conftest import RESTART

    e, ttl = server, 1.5
    a, b = e.holder("A", "a"), e.holder("B", "b")
    r = a.call("acquire", key=e.key, ttl=ttl, timeout=5)
    assert r["ok"], r
    outage = rnd % 2 == 0  # longer than the TTL: A must lose the lease
    # B tries all along; after a long outage, until it has had the key.
    b.send("loop", key=e.key, ttl=ttl, seconds=30 if outage else 2.5 * ttl, hold_max=0.05,
           timeout=0, seed=1, stop_after=3 if outage else None)
    time.sleep(0.2)
    t0 = time.monotonic()
    if e.backend in RESTART:
        from faultlib import Stats

        Stats.fault("server_restart")
        pause = 2 if outage else 0
        subprocess.run(f"{os.environ[RESTART[e.backend]]} {pause}", shell=True, check=True,
                       timeout=120, stdout=subprocess.DEVNULL)
    else:
        e.pa.enable(False)
        e.pb.enable(False)
        time.sleep(3.5 if outage else 1.0)
        e.pa.enable(True)
        e.pb.enable(True)
    down = time.monotonic() - t0
    e.history.note("test", f"server back after {down:.1f} s")
    print(f"{e.backend}: server back after {down:.1f} s")
    rb = b.reply(wait=120)
    r = a.call("release", wait=60)
    if outage:
        assert a.lost, f"A kept its lease through an outage longer than its TTL: {r}"
        assert rb["grants"] > 0, f"B never got the key after the outage: {rb}"
    assert r["ok"] or r["err"] in ("NOT_HELD", "LOST"), r
    recovery_phase(e, a, b, ttl / 2)
    assert_sound(e.history)
