"""One leaselock client in a process of its own, driven by the fault suite
(faultlib.Holder): commands arrive as JSON lines on stdin, replies and
events leave as JSON lines on stdout, every time on CLOCK_MONOTONIC.

    python3 holder.py NAME URI

Events: acquired (fence, t = acquire returned, deadline), deadline (the
local deadline moved: a renewal), release_sent (t, before the call), lost
(on_lost ran at t). The process keeps one client for its whole life: after
a fault, the same client must work again.
"""
import json
import os
import random
import resource
import select
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import leaselock  # noqa: E402
from faultlib import FencedStore  # noqa: E402

NAME, URI = sys.argv[1], sys.argv[2]
out_mu = threading.Lock()
mono = time.monotonic


def sleep(seconds):
    """time.sleep, by select(): under libfaketime 0.9.10 with the monotonic
    clock left real, Python's clock_nanosleep(TIMER_ABSTIME) fails with
    EINVAL."""
    select.select([], [], [], max(0.0, seconds))


def emit(ev, **kw):
    kw["ev"] = ev
    line = json.dumps(kw) + "\n"
    with out_mu:
        sys.stdout.write(line)
        sys.stdout.flush()


def deadline_of(lease):
    """The lease's local deadline on CLOCK_MONOTONIC, or None once it is not
    held. The core keeps whole milliseconds: remaining = deadline -
    floor(now), so the deadline is exact when now's millisecond is known,
    i.e. when the reads before and after fall in the same millisecond;
    otherwise the later read gives an upper bound."""
    for _ in range(5):
        t0 = mono()
        rem = lease.expires_in
        t1 = mono()
        if not lease.held:
            return None
        if int(t0 * 1000) == int(t1 * 1000):
            return int(t1 * 1000) / 1000.0 + rem
    return t1 + rem


class State:
    def __init__(self):
        # Setting up, not a scenario: a connect that times out on a loaded
        # machine is tried again.
        for attempt in range(3):
            try:
                self.client = leaselock.connect(URI, label=f"faults-{NAME}")
                break
            except leaselock.BackendError:
                if attempt == 2:
                    raise
                sleep(0.5)
        self.mu = threading.Lock()
        self.active = {}  # fence -> [lease, last deadline reported]
        self.lease = None
        threading.Thread(target=self.sampler, daemon=True).start()

    def on_lost(self, lease):
        emit("lost", key=lease.key, fence=lease.fence, t=mono())

    def track(self, lease, t):
        d = deadline_of(lease)
        emit("acquired", key=lease.key, fence=lease.fence, t=t, deadline=d if d else t)
        with self.mu:
            self.active[lease.fence] = [lease, d or t]

    def untrack(self, lease):
        with self.mu:
            self.active.pop(lease.fence, None)

    def sampler(self):
        while True:
            sleep(0.005)
            with self.mu:
                items = list(self.active.items())
            for fence, ent in items:
                d = deadline_of(ent[0])
                if d is not None and d > ent[1] + 0.0005:
                    ent[1] = d
                    emit("deadline", key=ent[0].key, fence=fence, d=d)

    def acquire(self, key, ttl, timeout):
        lock = self.client.lock(key, ttl=ttl, on_lost=self.on_lost)
        try:
            lease = lock.acquire(timeout=timeout)
        except leaselock.LockError as e:
            return None, getattr(e, "code", type(e).__name__)
        except RuntimeError as e:
            # A release whose statement reached no connection leaves the
            # lease held (and renewed): asking again from this thread would
            # wait for itself, which the binding refuses at once.
            if "already held by this" not in str(e):
                raise
            return None, "SELF_WAIT"
        self.track(lease, mono())
        return lease, None

    def release(self, lease):
        emit("release_sent", key=lease.key, fence=lease.fence, t=mono())
        try:
            lease.release()
            err = None
        except leaselock.LockError as e:
            err = getattr(e, "code", type(e).__name__)
        self.untrack(lease)
        return err


def code_of(e):
    return getattr(e, "code", type(e).__name__)


def op_loop(st, key, ttl, seconds, hold_max, timeout, seed, stop_after=None):
    """Contention: acquire, hold a random time (sometimes past the TTL, so
    renewal matters), release; until `seconds` have passed, or once it has
    had stop_after grants."""
    rnd = random.Random(seed)
    end = mono() + seconds
    counts = {"grants": 0, "errors": {}}
    while mono() < end and (stop_after is None or counts["grants"] < stop_after):
        lease, err = st.acquire(key, ttl, timeout)
        if lease is None:
            counts["errors"][err] = counts["errors"].get(err, 0) + 1
            sleep(rnd.uniform(0, 0.05))
            continue
        counts["grants"] += 1
        sleep(rnd.uniform(0, hold_max))
        err = st.release(lease)
        if err:
            counts["errors"]["release " + err] = counts["errors"].get("release " + err, 0) + 1
    return counts


def op_recover(st, key, ttl, hold, timeout, store=None):
    """The same client works again: acquire, hold past the TTL (renewal
    must work), write to the fenced store, release."""
    t0 = mono()
    lease, err = st.acquire(key, ttl, timeout)
    if lease is None:
        return {"ok": False, "why": f"acquire: {err} after {mono() - t0:.1f} s"}
    end = mono() + hold
    while mono() < end:
        if not lease.held:
            st.release(lease)
            return {"ok": False, "why": f"lost the lease while holding it (fence {lease.fence})"}
        sleep(0.02)
    accepted, seen = FencedStore(store).write(lease.fence, NAME) if store else (True, 0)
    err = st.release(lease)
    if err:
        return {"ok": False, "why": f"release: {err}"}
    if not accepted:
        return {"ok": False, "why": f"store refused fence {lease.fence} (seen {seen})"}
    return {"ok": True, "fence": lease.fence}


def main():
    st = State()
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("op")
        try:
            if op == "quit":
                break
            if op == "hello":
                r = {"pid": os.getpid()}
            elif op == "acquire":
                lease, err = st.acquire(cmd["key"], cmd["ttl"], cmd.get("timeout", 0))
                if lease is not None:
                    st.lease = lease
                r = {"ok": lease is not None, "err": err,
                     "fence": lease.fence if lease else None}
            elif op == "write":
                lease = st.lease
                accepted, seen = FencedStore(cmd["path"]).write(lease.fence, NAME)
                r = {"accepted": accepted, "seen": seen, "fence": lease.fence}
            elif op == "renew":
                try:
                    st.lease.renew()
                    r = {"ok": True, "err": None}
                except leaselock.LockError as e:
                    r = {"ok": False, "err": code_of(e)}
            elif op == "release":
                err = st.release(st.lease)
                r = {"ok": err is None, "err": err}
            elif op == "force_release":
                r = {"ok": st.client.force_release(cmd["key"])}
            elif op == "state":
                lease = st.lease
                ru = resource.getrusage(resource.RUSAGE_SELF)
                r = {"held": bool(lease and lease.held), "lost": bool(lease and lease.lost),
                     "wall": time.time(), "mono": mono(), "cpu": ru.ru_utime + ru.ru_stime}
            elif op == "loop":
                r = op_loop(st, **cmd)
            elif op == "recover":
                r = op_recover(st, **cmd)
            else:
                r = {"crash": f"unknown op {op}"}
        except Exception:
            r = {"crash": traceback.format_exc()}
        emit("reply", **r)
    st.client.close()


if __name__ == "__main__":
    main()
