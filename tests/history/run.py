#!/usr/bin/env python3
"""run.py - runs the history workers on one backend and checks the history
(tests/history/README.md).

    run.py --backend NAME --uri URI --c-worker PATH --pythonpath DIR
           --lua54-cpath CPATH --luajit-cpath CPATH
           [--seconds S] [--until-grants N] [--max-seconds S]
           [--summary FILE] [--workdir DIR]

One round: the C, Python and Lua workers (8 processes by default, C and
Python ones with 2 threads each) take leases on a few fresh keys for
--seconds, then check.py proves the history. With --topology NAME (a
replicated test topology, tests/topology/) instead of --uri, the run
starts it, points the workers at its multi-host URI (max_ttl
--max-ttl), and fails its primary over --failovers times per round,
evenly spread (SIGKILL and cut-off in turn, each followed by a restore):
the checker then proves that no failover gave a key to two holders, lost
an update or sent a fence back. Rounds repeat until
--until-grants grants are checked or --max-seconds have passed (default:
one round). The round's directory is removed when it passed and kept
(its path printed) when it did not. Exits 1 on any violation.
"""
import argparse
import bisect
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
COUNTS = ("grants", "overlaps", "fence_errors", "lost_updates", "problems", "increments",
          "end_released", "end_lost", "end_not_held", "end_error", "late_writes", "errors",
          "overlaps_late", "empty")


def commands(a, uri, rundir, prefix, seed):
    """(worker id, argv, env) of every worker process of a round."""
    out = []
    common = [uri, rundir, prefix]
    tail = [str(a.seconds), str(a.nkeys), str(seed)]
    for i in range(a.c_procs):
        out.append((f"c{i}", [a.c_worker, *common, f"c{i}", str(a.c_threads), *tail], {}))
    for i in range(a.py_procs):
        out.append((f"py{i}", [sys.executable, os.path.join(HERE, "worker.py"), *common,
                               f"py{i}", str(a.py_threads), *tail],
                    {"PYTHONPATH": a.pythonpath, "PYTHONDONTWRITEBYTECODE": "1"}))
    for i in range(a.lua_procs):
        interp, cpath = (("lua5.4", a.lua54_cpath) if i % 2 == 0 else ("luajit", a.luajit_cpath))
        out.append((f"lua{i}", [interp, os.path.join(HERE, "worker.lua"), *common, f"lua{i}",
                                *tail], {"LUA_CPATH": cpath}))
    return out


class ClockWatch:
    """Samples wall clock minus monotonic clock every 5 ms during a round:
    SQLite (and a server on this machine) judge expiry by the wall clock,
    so a step of it can end a lease early without any fault of leaselock's.
    Reported with the round, never judged."""

    def __init__(self):
        self.steps = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    @staticmethod
    def offset():
        """Wall minus monotonic, from reads close enough to trust (a
        preemption between them would look like a step)."""
        while True:
            m1 = time.monotonic_ns()
            w = time.time_ns()
            m2 = time.monotonic_ns()
            if m2 - m1 < 100_000:
                return w - (m1 + m2) // 2

    def run(self):
        prev = self.offset()
        while not self.stop.wait(0.005):
            d = self.offset()
            if abs(d - prev) > 500_000:
                self.steps.append((time.monotonic_ns(), (d - prev) / 1e6))
            prev = d

    def done(self):
        self.stop.set()
        self.thread.join()
        return self.steps


class FailoverDriver:
    """Fails the topology's primary over `count` times within `seconds`,
    evenly spread, in a thread of its own; what it did is in `done` and
    `errors` once joined."""

    def __init__(self, topo, count, seconds):
        self.topo, self.count, self.seconds = topo, count, seconds
        self.done, self.errors = [], []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        gap = self.seconds / (self.count + 1)
        t0 = time.monotonic()
        for i in range(self.count):
            time.sleep(max(0.0, t0 + gap * (i + 1) - time.monotonic()))
            how = "kill" if i % 2 == 0 else "cut"
            try:
                t = self.topo.failover(how)
                self.topo.restore()
                self.done.append((how, t.promoted - t.began, (int(t.began * 1e9), int(t.promoted * 1e9))))
            except Exception as e:  # noqa: BLE001 - reported as a problem
                self.errors.append(f"failover {i} ({how}): {type(e).__name__}: {e}")
                return

    def join(self):
        self.thread.join()


def unavailability(rundir, failovers):
    """For each failover ((went, promoted), CLOCK_MONOTONIC ns: the
    workers' clock), the seconds from the old primary's loss to the first
    grant of any key acquired once the new primary took writes: how long
    a waiting client could get nothing. (A reply of the old primary's that
    returned after the loss is no grant of the new one's.) A failover
    after the workers' last grant is left out."""
    by_key, _, _ = check.load(rundir, [])
    acquired = sorted(g.t_acq for grants in by_key.values() for g in grants)
    gaps = []
    for went, promoted in failovers:
        i = bisect.bisect_right(acquired, promoted)
        if i < len(acquired):
            gaps.append((acquired[i] - went) / 1e9)
    return gaps


def percentile(values, p):
    """The nearest-rank percentile p (0-100) of values (0 when none)."""
    if not values:
        return 0.0
    v = sorted(values)
    return v[max(0, math.ceil(p / 100 * len(v)) - 1)]


def one_round(a, n, totals):
    rundir = tempfile.mkdtemp(prefix=f"history-{a.backend}-", dir=a.workdir)
    uri = f"sqlite://{rundir}/locks.db" if a.uri == "sqlite" else a.uri
    prefix = f"history/{secrets.token_hex(6)}"
    seed = int.from_bytes(secrets.token_bytes(4), "little")
    procs = []
    watch = ClockWatch()
    for wid, argv, env in commands(a, uri, rundir, prefix, seed):
        log = open(os.path.join(rundir, f"{wid}.log"), "w")
        procs.append((wid, subprocess.Popen(argv, env={**os.environ, **env}, stdout=log,
                                            stderr=subprocess.STDOUT), log))
    failed = []
    driver = FailoverDriver(a.topo, a.failovers, a.seconds) if a.topo else None
    limit = time.monotonic() + a.seconds + 60
    for wid, p, log in procs:
        try:
            rc = p.wait(timeout=max(1, limit - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
            failed.append(f"{wid} did not finish in time")
        log.close()
        if rc != 0:
            failed.append(f"{wid} exited with {rc}")
    if driver:
        driver.join()
        failed += driver.errors
        totals["failovers"] += len(driver.done)
        for how, took, _ in driver.done:
            print(f"  [{a.backend} round {n}] failover ({how}): the new primary took writes "
                  f"{took:.2f} s after the old one went")
    for wid, p, log in procs:
        text = open(log.name).read().strip()
        if text:
            print(f"  [{a.backend} round {n}] {wid}: " + text.replace("\n", f"\n  {wid}: ")[:2000])
    steps = watch.done()
    for at, ms in steps:
        print(f"  [{a.backend} round {n}] the wall clock stepped by {ms:+.3f} ms "
              f"(monotonic {at})")
    totals["clock_steps"] += len(steps)
    t = check.check([rundir])
    if driver:
        gaps = unavailability(rundir, [times for _, _, times in driver.done])
        totals.setdefault("unavailable_s", []).extend(gaps)
        print(f"  [{a.backend} round {n}] keys unavailable after each failover: "
              + ", ".join(f"{g:.2f} s" for g in gaps))
    for k in COUNTS:
        totals[k] += t[k]
    totals["overlap_max_ns"] = max(totals["overlap_max_ns"], t["overlap_max_ns"])
    totals["problems"] += len(failed)
    for f in failed:
        print(f"PROBLEM: {f} (seed {seed}, {rundir})")
    bad = t["overlaps"] + t["fence_errors"] + t["lost_updates"] + t["problems"] + len(failed)
    print(f"  {a.backend} round {n}: {t['grants']} grants, {t['overlaps']} overlaps "
          f"({t['overlaps_late']} by the last reads alone), "
          f"{t['lost_updates']} lost updates, {t['end_lost']} lost, {t['end_not_held']} "
          f"not-held, {t['errors']} worker errors (seed {seed})", flush=True)
    if bad or a.keep:
        print(f"  kept {rundir}")
    else:
        shutil.rmtree(rundir, ignore_errors=True)
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", required=True)
    ap.add_argument("--uri", help='"sqlite": a fresh file per round')
    ap.add_argument("--topology", help="a replicated test topology (tests/topology/)")
    ap.add_argument("--failovers", type=int, default=3, help="per round, with --topology")
    ap.add_argument("--max-ttl", default="1s", help="the topology URI's max_ttl")
    ap.add_argument("--c-worker", required=True)
    ap.add_argument("--pythonpath", required=True)
    ap.add_argument("--lua54-cpath", required=True)
    ap.add_argument("--luajit-cpath", required=True)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--until-grants", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=0)
    ap.add_argument("--nkeys", type=int, default=3)
    ap.add_argument("--c-procs", type=int, default=3)
    ap.add_argument("--c-threads", type=int, default=2)
    ap.add_argument("--py-procs", type=int, default=3)
    ap.add_argument("--py-threads", type=int, default=2)
    ap.add_argument("--lua-procs", type=int, default=2)
    ap.add_argument("--summary")
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true", help="keep every round's directory")
    a = ap.parse_args()
    if bool(a.uri) == bool(a.topology):
        ap.error("give one of --uri and --topology")
    if a.workdir:
        os.makedirs(a.workdir, exist_ok=True)
    a.topo = None
    if a.topology:
        sys.path.insert(0, os.path.dirname(HERE))
        from topology import make_topology  # noqa: E402 - tests/ is on the path now

        a.topo = make_topology(a.topology, tempfile.mkdtemp(prefix=f"topo-{a.topology}-",
                                                            dir=a.workdir))
        try:
            a.topo.start()
            a.uri = a.topo.uri(max_ttl=a.max_ttl, io_timeout="2s", connect_timeout="2")
        except BaseException:
            a.topo.stop()
            raise
    try:
        return run_rounds(a)
    finally:
        if a.topo:
            a.topo.stop()


def run_rounds(a):
    totals = defaultdict(int)
    start = time.monotonic()
    n, bad = 0, 0
    while True:
        n += 1
        bad += one_round(a, n, totals)
        elapsed = time.monotonic() - start
        out_of_time = a.max_seconds > 0 and elapsed + a.seconds > a.max_seconds
        if a.until_grants > 0:
            if totals["grants"] >= a.until_grants or out_of_time:
                break
        elif a.max_seconds <= 0 or out_of_time:
            break
    elapsed = time.monotonic() - start
    print(f"history {a.backend}: {totals['grants']} grants checked, {totals['overlaps']} "
          f"overlaps, {totals['lost_updates']} lost updates, {totals['fence_errors']} fence "
          f"errors, {totals['problems']} problems ({n} rounds, {elapsed:.0f} s; "
          f"{totals['empty']} empty grants; "
          f"largest overlap {totals['overlap_max_ns'] / 1e6:.3f} ms, "
          f"{totals['overlaps_late']} by the last reads alone; "
          f"{totals['increments']} increments; ends: {totals['end_released']} released, "
          f"{totals['end_lost']} lost, {totals['end_not_held']} not-held, "
          f"{totals['end_error']} error; {totals['late_writes']} late writes; "
          f"{totals['errors']} worker errors; {totals['clock_steps']} wall clock steps"
          + (f"; {totals['failovers']} failovers" if a.topo else "") + ")",
          flush=True)
    gaps = totals.get("unavailable_s", [])
    p50, p99 = percentile(gaps, 50), percentile(gaps, 99)
    if a.topo:
        print(f"history {a.backend}: keys unavailable after a failover: p50 {p50:.2f} s, "
              f"p99 {p99:.2f} s, max {max(gaps, default=0):.2f} s ({len(gaps)} measured)")
    if a.summary:
        os.makedirs(os.path.dirname(os.path.abspath(a.summary)), exist_ok=True)
        with open(a.summary, "w", encoding="utf-8") as f:
            f.write(f"tool=history\nbackend={a.backend}\ngrants={totals['grants']}\n"
                    f"overlaps={totals['overlaps']}\n"
                    f"fence_regressions={totals['fence_errors']}\n"
                    f"lost_updates={totals['lost_updates']}\n"
                    f"problems={totals['problems']}\n"
                    + (f"failovers={totals['failovers']}\n"
                       f"max_unavailable_p50_ms={round(p50 * 1000)}\n"
                       f"max_unavailable_p99_ms={round(p99 * 1000)}\n" if a.topo else ""))
    return 1 if bad or totals["grants"] == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
