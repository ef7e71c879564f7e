"""Clients whose wall clock is wrong (libfaketime, through the proxies):
one hour ahead, one hour behind, and a wall clock stepped mid-hold. The
contract judges expiry on the database's clock only, so none of this may
let a client steal a live lease or shorten its own. The monotonic clock
stays real (FAKETIME_DONT_FAKE_MONOTONIC=1), as the contract's local
deadlines use it.

SQLite has no server clock (all its users share the host's), so these run
on the server backends."""
import time

from faultlib import Stats, assert_sound, faketime_env

HOUR = 3600.0


def wall_offset(h):
    st = h.call("state")
    return st["wall"] - time.time()


def holds_against(e, holder, other, ttl, seconds):
    """holder takes the key and keeps it `seconds` (past its TTL: renewal)
    while other keeps trying; then releases. other must get nothing while
    the lease lives and the key once it is released."""
    r = holder.call("acquire", key=e.key, ttl=ttl, timeout=5)
    assert r["ok"], r
    before = holder.call("state")
    other.send("loop", key=e.key, ttl=ttl, seconds=seconds + 10, hold_max=0.05, timeout=0,
               seed=1, stop_after=3)
    time.sleep(seconds)
    st = holder.call("state")
    assert st["held"], f"{holder.name} lost its lease under a skewed clock"
    busy = (st["cpu"] - before["cpu"]) / (st["mono"] - before["mono"])
    assert busy < 0.5, f"{holder.name} used {busy:.0%} of a CPU holding a lease (a busy loop?)"
    r = holder.call("release")
    assert r["ok"], r
    ro = other.reply(wait=30)
    assert ro["grants"] > 0, f"{other.name} never got the released key: {ro}"


def test_skew_one_hour(server, rnd):
    """A one hour behind, B one hour ahead: each holds past its TTL while
    the other tries; neither steals nor loses."""
    e, ttl = server, 1.0
    a = e.holder("A", "a", faketime_env("-1h"))
    b = e.holder("B", "b", faketime_env("+1h"))
    assert abs(wall_offset(a) + HOUR) < 60 and abs(wall_offset(b) - HOUR) < 60, \
        "faketime did not move the clients' clocks"
    Stats.fault("clock_skew", 2)
    holds_against(e, a, b, ttl, 1.5 * ttl)
    holds_against(e, b, a, ttl, 1.5 * ttl)
    assert not a.lost and not b.lost, (a.lost, b.lost)
    assert_sound(e.history)


def test_wall_clock_step(server, rnd):
    """Both clients' wall clocks step mid-hold (a timestamp file that
    libfaketime re-reads): A's an hour forward while it holds, B's an hour
    back while it waits; then the other way round. The lease neither ends
    early nor lives on."""
    e, ttl = server, 1.0
    fa, fb = e.tmp / "clock-a", e.tmp / "clock-b"
    fa.write_text("+0\n")
    fb.write_text("+0\n")
    a = e.holder("A", "a", faketime_env(stamp_file=str(fa)))
    b = e.holder("B", "b", faketime_env(stamp_file=str(fb)))
    assert abs(wall_offset(a)) < 60

    r = a.call("acquire", key=e.key, ttl=ttl, timeout=5)
    assert r["ok"], r
    b.send("loop", key=e.key, ttl=ttl, seconds=10, hold_max=0.05, timeout=0, seed=1,
           stop_after=3)
    time.sleep(ttl / 2)
    fa.write_text("+3600\n")
    fb.write_text("-3600\n")
    Stats.fault("clock_step", 2)
    time.sleep(ttl)
    assert abs(wall_offset(a) - HOUR) < 60, "A's clock did not step"
    st = a.call("state")
    assert st["held"], "A lost its lease when its wall clock stepped"
    assert a.call("release")["ok"]
    rb = b.reply(wait=30)
    assert rb["grants"] > 0, rb

    # And back: A's clock an hour back while B holds.
    r = b.call("acquire", key=e.key, ttl=ttl, timeout=5)
    assert r["ok"], r
    a.send("loop", key=e.key, ttl=ttl, seconds=10, hold_max=0.05, timeout=0, seed=2,
           stop_after=3)
    time.sleep(ttl / 2)
    fa.write_text("-3600\n")
    fb.write_text("+0\n")
    Stats.fault("clock_step", 2)
    time.sleep(ttl)
    assert b.call("state")["held"], "B lost its lease when its wall clock stepped"
    assert b.call("release")["ok"]
    ra = a.reply(wait=30)
    assert ra["grants"] > 0, ra
    assert not a.lost and not b.lost, (a.lost, b.lost)
    assert_sound(e.history)
