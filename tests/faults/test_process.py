"""Holders that die or freeze: SIGKILL and SIGSTOP, on every backend
(SQLite included). Holders are processes of their own (holder.py)."""
import random
import signal
import time

from faultlib import FencedStore, assert_sound, wait_for

TTL = 0.5


def test_sigkill_holder(anybackend, rnd):
    """A holder killed at a random point of its hold (before or after some
    renewals): the key stays blocked until its lease expires, the next
    owner's grant starts after the dead holder's local deadline and carries
    a larger fence, which the store accepts."""
    e = anybackend
    a, b = e.holder("A", "a"), e.holder("B", "b")
    r = a.call("acquire", key=e.key, ttl=TTL, timeout=5)
    assert r["ok"], r
    assert a.call("write", path=e.store)["accepted"]
    time.sleep(random.uniform(0.05, 1.5 * TTL))
    a.kill()
    r = b.call("acquire", key=e.key, ttl=TTL, timeout=10)
    assert r["ok"], r
    w = b.call("write", path=e.store)
    assert w["accepted"] and w["fence"] > w["seen"], w
    assert b.call("release")["ok"]
    # B's client works on as before.
    r = b.call("recover", key=e.key, ttl=TTL, hold=1.5 * TTL, timeout=10, store=e.store)
    assert r["ok"], r
    assert_sound(e.history)


def test_sigkill_during_contention(anybackend, rnd):
    """Two holders contend; one is killed at a random moment, holding or
    not. The survivor goes on; no grant overlaps the dead one's."""
    e = anybackend
    a, b = e.holder("A", "a"), e.holder("B", "b")
    a.send("loop", key=e.key, ttl=0.5, seconds=10, hold_max=0.4, timeout=1, seed=rnd)
    b.send("loop", key=e.key, ttl=0.5, seconds=2.0, hold_max=0.4, timeout=1, seed=rnd + 1)
    time.sleep(random.uniform(0.3, 1.5))
    a.kill()
    r = b.reply(wait=30)
    assert r["grants"] > 0, r
    r = b.call("recover", key=e.key, ttl=TTL, hold=1.5 * TTL, timeout=10, store=None)
    assert r["ok"], r
    assert_sound(e.history)


def test_sigstop_holder_past_ttl(anybackend, rnd):
    """A holder frozen (SIGSTOP) past its TTL: another owner takes the key
    once the lease expired and writes with its larger fence. After SIGCONT
    the first holder, resuming mid-section, writes with its old fence and
    the store refuses it; its renew and release report the loss (NOT_HELD
    or LOST) and on_lost has run; then its same client takes the key
    again."""
    e = anybackend
    a, b = e.holder("A", "a"), e.holder("B", "b")
    r = a.call("acquire", key=e.key, ttl=TTL, timeout=5)
    assert r["ok"], r
    fence_a = r["fence"]
    assert a.call("write", path=e.store)["accepted"]
    time.sleep(random.uniform(0.0, TTL / 2))
    a.signal(signal.SIGSTOP)
    e.history.exempt_stopped("A")
    t_stop = time.monotonic()
    r = b.call("acquire", key=e.key, ttl=5, timeout=10)
    assert r["ok"], r
    assert r["fence"] > fence_a
    w = b.call("write", path=e.store)
    assert w["accepted"], w
    # Frozen well past the TTL, whoever was fast.
    time.sleep(max(0.0, t_stop + TTL + 0.3 - time.monotonic()))
    a.signal(signal.SIGCONT)
    a.stopped = False
    w = a.call("write", path=e.store)
    assert not w["accepted"] and w["seen"] > w["fence"] == fence_a, w
    r = a.call("renew")
    assert not r["ok"] and r["err"] in ("NOT_HELD", "LOST"), r
    r = a.call("release")
    assert not r["ok"] and r["err"] in ("NOT_HELD", "LOST"), r
    wait_for(lambda: fence_a in a.lost, 5, "A's on_lost after SIGCONT")
    st = a.call("state")
    assert st["lost"] and not st["held"], st
    assert b.call("release")["ok"]
    r = a.call("recover", key=e.key, ttl=TTL, hold=1.5 * TTL, timeout=10, store=e.store)
    assert r["ok"], r
    assert r["fence"] > w["seen"]
    assert_sound(e.history)
    assert int(open(e.store).readline()) == r["fence"]
