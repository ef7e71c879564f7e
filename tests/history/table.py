#!/usr/bin/env python3
"""table.py - the `make stress` table: one row per backend, from the summary
files the stress tools wrote into a directory.

    table.py [--goal COLUMN=N ...] STRESS_DIR

Every *.summary (key=value lines) and *.json (one object, or a list of
objects) in STRESS_DIR is one summary: `backend` names its row (default
"-"), `tool` the tool, and every other key with an integer value is a
count added into the column of that name. The columns the issue names
come first, in this order; any other count gets a column of its own after
them:

    grants overlaps lost_updates faults_injected simulated_steps
    fuzz_executions crashes

A column whose name starts with "max_" (a figure, such as the history
across failovers' max_unavailable_p99_ms) is combined by its largest
value, in the rows and the total, never summed.

Violation columns (overlaps, lost_updates, fence_regressions, crashes, and any column whose
name ends in "violations", "failures" or "problems") must add up to 0.
--goal COLUMN=N: the total of COLUMN must reach N (e.g. grants=1000000).
Exits 1 when a violation column is not 0, a goal is missed, or a summary
cannot be read.
"""
import argparse
import glob
import json
import os
import sys
from collections import defaultdict

COLUMNS = ("grants", "overlaps", "lost_updates", "faults_injected", "simulated_steps",
           "fuzz_executions", "crashes")
VIOLATIONS = ("overlaps", "lost_updates", "fence_regressions", "crashes")


def is_violation(col):
    return col in VIOLATIONS or col.endswith(("violations", "failures", "problems"))


def read_summaries(d, bad):
    out = []
    for path in sorted(glob.glob(os.path.join(d, "*.summary"))):
        rec = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    if "=" not in line:
                        bad.append(f"{path}: not key=value: {line}")
                        continue
                    k, v = line.split("=", 1)
                    rec[k.strip()] = v.strip()
        out.append((path, rec))
    for path in sorted(glob.glob(os.path.join(d, "*.json"))):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            bad.append(f"{path}: {e}")
            continue
        for rec in data if isinstance(data, list) else [data]:
            if isinstance(rec, dict):
                out.append((path, rec))
            else:
                bad.append(f"{path}: not an object: {rec!r}")
    return out


def combine(row, col, n):
    """Adds n into row[col], or keeps the larger for a "max_" column."""
    row[col] = max(row[col], n) if col.startswith("max_") else row[col] + n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--goal", action="append", default=[], metavar="COLUMN=N")
    ap.add_argument("dir")
    a = ap.parse_args()
    bad = []
    rows = defaultdict(lambda: defaultdict(int))
    tools = defaultdict(set)
    extra = []
    for path, rec in read_summaries(a.dir, bad):
        backend = str(rec.get("backend", "-"))
        tools[backend].add(str(rec.get("tool", os.path.basename(path))))
        for k, v in rec.items():
            if k in ("backend", "tool"):
                continue
            try:
                n = int(v)
            except (TypeError, ValueError):
                continue  # text fields (a seed, a note) are not counts
            combine(rows[backend], k, n)
            if k not in COLUMNS and k not in extra:
                extra.append(k)
    cols = list(COLUMNS) + sorted(extra)
    total = defaultdict(int)
    for r in rows.values():
        for c in cols:
            combine(total, c, r.get(c, 0))
    width = {c: max(len(c), len(f"{total[c]:,}")) for c in cols}
    names = sorted(rows) + ["total"]
    nw = max(len(n) for n in names + ["backend"])
    print(f"{'backend':<{nw}}  " + "  ".join(f"{c:>{width[c]}}" for c in cols) + "  tools")
    for name in names:
        r = total if name == "total" else rows[name]
        cells = [f"{r[c]:,}" if (name == "total" or c in r) else "-" for c in cols]
        tl = "" if name == "total" else ",".join(sorted(tools[name]))
        print(f"{name:<{nw}}  " + "  ".join(f"{v:>{width[c]}}" for v, c in zip(cells, cols))
              + f"  {tl}")
    if not rows:
        bad.append(f"{a.dir}: no summaries")
    for c in cols:
        if is_violation(c) and total[c]:
            bad.append(f"{c}: {total[c]:,} (must be 0)")
    for g in a.goal:
        c, _, n = g.partition("=")
        if total[c] < int(n):
            bad.append(f"goal {c} >= {int(n):,} not reached: {total[c]:,}")
        else:
            print(f"goal {c} >= {int(n):,}: reached ({total[c]:,})")
    for b in bad:
        print("stress:", b)
    print("stress: " + ("FAILED" if bad else "passed"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
