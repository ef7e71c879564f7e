#!/usr/bin/env python3
"""check.py - proves a recorded lease history safe (tests/history/README.md).

    check.py [--summary FILE] [--label NAME] RUNDIR [RUNDIR ...]

Each RUNDIR holds the history files of one run on one backend (*.hist, one
line per grant, written by the C, Python and Lua workers) and the shared
counters (counter.K). Per key, with the grants in fence order:

  1. fences strictly increase in the order the grants were acquired
     (sorted by t_acquired, no fence repeats or goes back);
  2. every grant's t_acquired is at or after the t_end of every grant with
     a smaller fence (the holder stopped before anyone else started);
  3. no increment was lost: the counter file of the key holds exactly the
     number of increments the grants on it report.

Rule 2 judges t_end. t_late, the end by the last read of the remaining
time alone (up to 1 ms later, README.md), is a second opinion: how many
acquires came before it is counted and printed, never judged.

Rules 1 and 2 leave out empty grants: an acquire that returned after the
lease's own local deadline (t_end <= t_acquired) gave its worker nothing
to hold. They are counted and shown.

A worker that did not end its file with a "# done" line failed, and so
does the run. Exits 1 on any violation, printing the offending pairs.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
from collections import defaultdict

FIELDS = ("key", "fence", "t_acq", "t_end", "t_late", "end", "worker", "binding", "inc", "t_write",
          "ttl", "flags")
ENDS = ("released", "lost", "not-held", "error")
SHOW = 10  # offending pairs printed per kind


class Grant:
    __slots__ = FIELDS + ("src",)

    def __init__(self, parts: list, src: str) -> None:
        (self.key, fence, t_acq, t_end, t_late, self.end, self.worker, self.binding, inc,
         t_write, ttl, self.flags) = parts
        self.fence, self.t_acq, self.t_end = int(fence), int(t_acq), int(t_end)
        self.t_late = int(t_late)
        if self.t_late < self.t_end:
            raise ValueError("t_late before t_end")
        self.inc, self.t_write, self.ttl = int(inc), int(t_write), int(ttl)
        if self.end not in ENDS or self.inc not in (0, 1):
            raise ValueError("bad end or inc")
        self.src = src

    def __str__(self) -> str:
        return (f"fence {self.fence} by {self.worker} ({self.binding}, ttl {self.ttl} ms, "
                f"{self.flags}): acquired at {self.t_acq}, held until {self.t_end} "
                f"({(self.t_end - self.t_acq) / 1e6:+.3f} ms; last read's bound "
                f"{(self.t_late - self.t_end) / 1e6:+.3f} ms later), {self.end}")


def load(rundir: str, problems: list) -> tuple:
    """The grants of a run by key, the backend named in the files, and the
    workers' counts from their "# done" lines."""
    by_key = defaultdict(list)
    backends = set()
    errors = 0
    files = sorted(glob.glob(os.path.join(rundir, "*.hist")))
    if not files:
        problems.append(f"{rundir}: no history files")
    for path in files:
        done = False
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.startswith("#"):
                    words = dict(w.split("=", 1) for w in line[1:].split() if "=" in w)
                    if "backend" in words:
                        backends.add(words["backend"])
                    if line.startswith("# done"):
                        done = True
                        errors += int(words.get("errors", 0))
                    continue
                parts = line.split()
                try:
                    if len(parts) != len(FIELDS):
                        raise ValueError(f"{len(parts)} fields")
                    g = Grant(parts, f"{os.path.basename(path)}:{n}")
                except ValueError as e:
                    problems.append(f"{path}:{n}: malformed line ({e}): {line.strip()}")
                    continue
                by_key[g.key].append(g)
        if not done:
            problems.append(f"{path}: no '# done' line: the worker did not finish")
    return by_key, backends, errors


def counter_value(rundir: str, key: str) -> int | None:
    """The counter file of a key: counter.K for key PREFIX/K."""
    path = os.path.join(rundir, "counter." + key.rsplit("/", 1)[-1])
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    return int(text) if text else 0


def check_key(grants: list, out: dict, shown: dict) -> None:
    """Rules 1 and 2 on the grants of one key."""
    def report(kind: str, text: str) -> None:
        out[kind] += 1
        if shown[kind] < SHOW:
            shown[kind] += 1
            print(text)

    # A grant whose acquire returned after its own local deadline (t_end at
    # or before t_acquired) was never held: its holder did nothing with it,
    # and when its lease ran out is unknown beyond "before t_acquired".
    held = [g for g in grants if g.t_end > g.t_acq]
    out["empty"] += len(grants) - len(held)
    by_time = sorted(held, key=lambda g: (g.t_acq, g.fence))
    for a, b in zip(by_time, by_time[1:]):
        if b.fence <= a.fence:
            report("fence_errors", f"FENCE ORDER on {a.key}: acquired later with a fence not "
                   f"larger:\n  first:  {a}  [{a.src}]\n  second: {b}  [{b.src}]")
    by_fence = sorted(held, key=lambda g: (g.fence, g.t_acq))
    latest = None  # the grant with the latest t_end among smaller fences
    late = None    # the same by t_late
    for g in by_fence:
        if latest is not None and latest.fence == g.fence:
            continue  # a repeated fence: rule 1 reports it
        if late is not None and g.t_acq < late.t_late:
            out["overlaps_late"] += 1
        if latest is not None and g.t_acq < latest.t_end:
            out["overlap_max_ns"] = max(out["overlap_max_ns"], latest.t_end - g.t_acq)
            report("overlaps", f"OVERLAP on {g.key}: acquired "
                   f"{(latest.t_end - g.t_acq) / 1e6:.3f} ms before the previous holder "
                   f"stopped:\n  holder:   {latest}  [{latest.src}]\n"
                   f"  acquirer: {g}  [{g.src}]")
        if latest is None or g.t_end > latest.t_end:
            latest = g
        if late is None or g.t_late > late.t_late:
            late = g
        if g.inc and g.t_write > g.t_end:
            # The worker checked its lease before writing but the write
            # returned after its own deadline (it was paused): not the lock's
            # fault, but it can explain a lost update, so it is shown.
            report("late_writes", f"late write on {g.key}: returned "
                   f"{(g.t_write - g.t_end) / 1e6:.3f} ms after the holder's end: {g}  "
                   f"[{g.src}]")


def check(rundirs: list) -> dict:
    totals = defaultdict(int)
    shown = defaultdict(int)
    problems: list = []
    backends = set()
    for rundir in rundirs:
        by_key, names, errors = load(rundir, problems)
        backends |= names
        totals["errors"] += errors
        for key, grants in sorted(by_key.items()):
            check_key(grants, totals, shown)
            totals["grants"] += len(grants)
            for g in grants:
                totals["end_" + g.end.replace("-", "_")] += 1
                totals["binding_" + g.binding] += 1
            incs = sum(g.inc for g in grants)
            value = counter_value(rundir, key)
            if value is None:
                if incs:
                    problems.append(f"{rundir}: {key}: {incs} increments but no counter file")
                continue
            totals["increments"] += incs
            if value != incs:
                totals["lost_updates"] += abs(incs - value)
                print(f"LOST UPDATE on {key}: the counter reads {value}, the grants report "
                      f"{incs} increments ({rundir})")
    for p in problems:
        print("PROBLEM:", p)
    totals["problems"] = len(problems)
    totals["backend"] = ",".join(sorted(backends)) or "?"
    return totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--summary", help="also write the counts as key=value lines here")
    ap.add_argument("--label", help="the name printed (default: the backend in the files)")
    ap.add_argument("rundirs", nargs="+")
    args = ap.parse_args()
    t = check(args.rundirs)
    name = args.label or t["backend"]
    bad = t["overlaps"] + t["lost_updates"] + t["fence_errors"] + t["problems"]
    bindings = " ".join(f"{k[8:]}={v}" for k, v in sorted(t.items())
                        if k.startswith("binding_"))
    print(f"history {name}: {t['grants']} grants checked, {t['overlaps']} overlaps, "
          f"{t['lost_updates']} lost updates, {t['fence_errors']} fence errors, "
          f"{t['problems']} problems ({t['empty']} empty grants; largest overlap {t['overlap_max_ns'] / 1e6:.3f} ms, "
          f"{t['overlaps_late']} by the last reads alone; {t['increments']} increments; ends: "
          f"{t['end_released']} released, {t['end_lost']} lost, {t['end_not_held']} not-held, "
          f"{t['end_error']} error; {t['late_writes']} late writes; "
          f"{t['errors']} worker errors; {bindings})")
    if args.summary:
        with open(args.summary, "w", encoding="utf-8") as f:
            f.write(f"tool=history\nbackend={name}\ngrants={t['grants']}\n"
                    f"overlaps={t['overlaps'] + t['fence_errors']}\n"
                    f"lost_updates={t['lost_updates']}\n")
    return 1 if bad or t["grants"] == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
