"""docs/benchmarks.md and docs/bench/*.png from bench/report/run.py's rows."""
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BACKENDS = ["sqlite", "mongodb", "mysql", "postgresql"]
PLACE = {"other-cpu": "server on another CPU", "client-cpu": "server on the client's CPU",
         "unplaced": "servers left to the scheduler", "": "in-process"}


def fmt(v, unit=""):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if unit == "ratio" or unit == "latency ratio":
        return f"{v:.3f}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def where(p):
    return PLACE.get(p, p)


# ---- goals -------------------------------------------------------------------

def scale_why(res, misses):
    out = []
    if any(r["backend"] == "mongodb" for r in misses):
        a = res.value("scale", "mongodb", "find {_id}", "probe_ms")
        b = res.value("scale", "mongodb", "find {_id, $expr}", "probe_ms")
        probe = (f" (measured in this run on the 100,000-record collection: find by _id alone "
                 f"{a:.1f} ms, find by _id with $expr {b:.1f} ms)" if a and b else "")
        out.append("MongoDB: the test server, mongo-java-server, uses its _id index only for a "
                   "query on _id alone; the acquire's {_id, $expr} and the release's {_id, owner} "
                   f"make it scan the collection{probe}. MongoDB itself answers those queries "
                   "through the _id index; a real MongoDB server is not part of this run.")
    for r in misses:
        if r["backend"] == "mongodb":
            continue
        b, p = r["backend"], r["placement"]
        a = res.value("scale", b, "100 keys", "latency_us", p)
        z = res.value("scale", b, "100000 keys", "latency_us", p)
        lo = res.value("scale", b, r["variant"], "ratio_p25", p)
        hi = res.value("scale", b, r["variant"], "ratio_p75", p)
        t = f"{b}: {a:.0f} µs/pair with 100 keys, {z:.0f} µs with 100,000" if a and z else b
        if lo is not None and hi is not None:
            t += f"; its rounds' middle half {lo:.2f}–{hi:.2f}"
            if lo <= 1.1:
                t += ", which reaches under the goal: not told apart from noise"
        out.append(t + ".")
    return " ".join(out)


def contention_value(res, backend, mode, n, metric, rows=None):
    """A figure of make bench-contention's row MODE with N workers (its
    variant is "MODE[ col=text...] n=N")."""
    for r in (rows if rows is not None else res.get("contention", backend=backend, metric=metric)):
        if (r["backend"] == backend and r["metric"] == metric
                and r["variant"].split()[0] == mode and r["variant"].endswith(f" n={n}")):
            return r["value"]
    return None


def contention_goal(res, out, noisy, every, title, mode, n, limits):
    """A goal on make bench-contention's MODE row with N workers, per
    backend: every (metric, minimum) of LIMITS held."""
    if not res.get("contention"):
        out.append((title, "not measured", "–", "make bench-contention did not run"))
        return
    figs, misses, absent = [], [], []
    for b in every:
        vals = {m: contention_value(res, b, mode, n, m) for m, _ in limits}
        if any(v is None for v in vals.values()):
            absent.append(b)
            continue
        t = f"{b} " + ", ".join(f"{m} {v:.2f}" for m, v in vals.items())
        figs.append(t)
        if any(vals[m] < lo for m, lo in limits):
            misses.append(t)
    why = ""
    if misses:
        why = ("Misses: " + "; ".join(misses) + ". Useful = throughput / ideal (hold + an "
               "uncontended pair); fairness = fewest / most grants per process (section 3)." + noisy)
    if absent:
        why += f" No {mode} n={n} row for {', '.join(absent)} (see the contention notes)."
    status = "NOT met" if misses else "partly measured" if absent else "met"
    if not figs:
        status = "not measured"
    out.append((title, status, "; ".join(figs) or "–", why.strip()))


# What "nothing else slower" compares with the report being replaced, and
# how much worse a figure may be before it counts as slower (the machine
# has 2 shared CPUs: figures of the same tree move by 10-20% between runs):
# (comparison, metric, higher is better, factor, absolute slack).
HOLD_CHECKS = [("contention", "useful", True, 0.8, 0.0),
               ("contention", "fairness", True, 0.8, 0.0),
               ("contention", "req/grant", False, 1.25, 0.1),
               ("contention", "handoff_p50", False, 1.25, 0.5),
               ("safety", "pairs_per_s", True, 0.8, 0.0)]
HOLD_TEXT = ("against the figures of the report being replaced (docs/bench/results.csv as it was "
             "before this run): contention's useful throughput and fairness and cost of safety's "
             "pairs/s count as slower below 0.8x the previous; requests per grant and hand-off "
             "p50 above 1.25x the previous plus 0.1 request or 0.5 ms")


def nothing_slower(res, noisy):
    """The goal "nothing else slower": (goal, status, figure, why)."""
    title = "Nothing else slower: the contention and safety figures of the previous report hold"
    prev = getattr(res, "previous", [])
    m = res.meta
    if not prev:
        return (title, "not measured", "–", "No previous docs/bench/results.csv to compare with.")
    base = f"the report of {m.get('previous-date', '?')}, leaselock {m.get('previous-leaselock', '?')}"
    compared, worse, ran = 0, [], set()
    for comp, metric, higher, factor, slack in HOLD_CHECKS:
        cur = res.get(comp, metric=metric)
        if not cur:
            continue
        ran.add(comp)
        for p in prev:
            if p["comparison"] != comp or p["metric"] != metric:
                continue
            if comp == "contention":
                mode, n = p["variant"].split()[0], p["variant"].rpartition(" n=")[2]
                v = contention_value(res, p["backend"], mode, n, metric, cur)
            else:
                v = next((r["value"] for r in cur if r["backend"] == p["backend"]
                          and r["variant"] == p["variant"]
                          and r["placement"] == p.get("placement", "")), None)
            if v is None:
                continue
            compared += 1
            old = p["value"]
            bad = v < old * factor - slack if higher else v > old * factor + slack
            if bad:
                worse.append(f"{comp} {p['backend']} {p['variant']} {metric} {fmt(old)} -> {fmt(v)}")
    missing = [c for c in ("contention", "safety") if c not in ran]
    fig = f"{compared} figures compared with {base}; {len(worse)} slower beyond the tolerance"
    why = f"Judged {HOLD_TEXT}."
    if m.get("quick") and not m.get("previous-quick"):
        why += (" This quick run (1 s contention cells, short rounds) is compared with a full "
                "run's figures.")
    if missing:
        why += f" Not run this time: {', '.join(missing)}."
    if worse:
        return (title, "NOT met", fig, "Slower: " + "; ".join(worse) + ". " + why + noisy)
    if not compared:
        return (title, "not measured", fig, why)
    return (title, "partly measured" if missing else "met", fig, why)


def goals(res):
    """[(goal, status, figure, why)]"""
    out = []
    quick = res.meta.get("quick")
    noisy = (" This was a BENCH_QUICK=1 run: short rounds on a shared machine, figures are noisy."
             if quick else "")

    def ratio_goal(title, rows, ok, fmt_row, why_miss, missing_why, expect=(),
                   key=lambda r: r["backend"]):
        """EXPECT: the keys (key(row), a backend by default) the goal is
        about; one without a row leaves the goal partly measured."""
        if not rows:
            out.append((title, "not measured", "–", missing_why))
            return
        fig = "; ".join(fmt_row(r) for r in rows)
        misses = [r for r in rows if not ok(r["value"])]
        have = {key(r) for r in rows}
        absent = [k for k in expect if k not in have]
        gap = (f" Not measured on {', '.join(map(str, absent))}: {missing_why} (see the notes)."
               if absent else "")
        if not misses:
            out.append((title, "partly measured" if absent else "met", fig, gap.strip()))
        else:
            out.append((title, "NOT met", fig,
                        "Misses: " + ", ".join(fmt_row(r) for r in misses) + ". " +
                        why_miss(misses) + gap + noisy))

    def lbl(r):
        p = r["placement"]
        return f"{r['backend']}{' (' + p + ')' if p else ''} {r['value']:.3f}"

    def spread(c, r, goal):
        lo = res.value(c, r["backend"], r["variant"], "ratio_p25", r["placement"])
        hi = res.value(c, r["backend"], r["variant"], "ratio_p75", r["placement"])
        if lo is None or hi is None:
            return ""
        within = lo <= goal <= hi
        return (f"; its rounds' middle half {lo:.2f}–{hi:.2f}"
                + (", which holds the goal: not told apart from noise" if within else ""))

    def us(rate):
        return 1e6 / rate if rate else float("nan")

    def engine_why(misses):
        parts = []
        for r in misses:
            b, p = r["backend"], r["placement"]
            e = res.value("engine-vs-bare", b, "engine", "pairs_per_s", p)
            x = res.value("engine-vs-bare", b, "bare", "pairs_per_s", p)
            best = res.value("engine-vs-bare", b, "engine/bare", "ratio_best_rounds", p)
            allr = res.value("engine-vs-bare", b, "engine/bare", "ratio_all_rounds", p)
            t = f"{b}{' (' + p + ')' if p else ''}: engine {us(e):.0f} µs/pair vs bare {us(x):.0f} µs"
            if best is not None:
                t += f"; fastest rounds {best:.3f}, all rounds together {allr:.3f}"
                if max(best, allr) >= 0.95:
                    t += " (these meet it: the median sits within the noise)"
            parts.append(t)
        return ("; ".join(parts) + ". The engine sends the same statements as the bare program. "
                "What it adds: before each statement a zero-timeout poll() that finds a "
                "connection the server closed while idle; waits bounded by io_timeout or the "
                "caller's timeout (PostgreSQL: a poll() with a timeout, where the bare libpq "
                "program waits without one); and its own per-pair work (argument checks, the "
                "owner, the lease object, the local deadline), whose code and data a server on the "
                "client's CPU evicts between statements. The µs above bound what that costs here.")

    def binding_why(c, side, engine_variant=None):
        def why(misses):
            parts = []
            for r in misses:
                b, p = r["backend"], r["placement"]
                if c == "python-vs-engine":
                    a = res.value(c, b, "python", "pairs_per_s", p)
                    e = res.value(c, b, "engine", "pairs_per_s", p)
                    extra = spread(c, r, 0.95)
                else:
                    interp = r["variant"].split()[0]
                    a = res.value(c, b, f"{interp} lock:with", "pairs_per_s", p)
                    e = res.value(c, b, f"{interp} engine", "pairs_per_s", p)
                    bst = res.value(c, b, r["variant"], "ratio_best_rounds", p)
                    extra = f"; fastest rounds {bst:.2f}" if bst is not None else ""
                    b = f"{interp} {b}"
                parts.append(f"{b}{' (' + p + ')' if p else ''}: {us(a):.0f} µs/pair vs the "
                             f"engine's {us(e):.0f} µs ({us(a) - us(e):+.0f} µs){extra}")
            return ("; ".join(parts) + f". The difference is what {side} does per pair "
                    "around the same C calls.")
        return why

    def peer_why(misses):
        parts = []
        for r in misses:
            b, p = r["backend"], r["placement"]
            ep = res.value("python-vs-engine", b, "engine/peer", "ratio_median", p)
            py = res.value("python-vs-engine", b, "python", "pairs_per_s", p)
            pe = res.value("python-vs-engine", b, "peer", "pairs_per_s", p)
            e = res.value("python-vs-engine", b, "engine", "pairs_per_s", p)
            t = (f"{b} ({p}): pure-Python {us(pe):.0f} µs/pair, `with lock:` {us(py):.0f} µs, "
                 f"the C engine alone {us(e):.0f} µs")
            if ep is not None:
                t += f" = {ep:.2f}x the peer"
                if ep < 2.5:
                    t += " (below 2.5x even with no Python at all)"
            parts.append(t)
        return ("; ".join(parts) + ". The server's work and the round trips are the same for "
                "both clients and take most of each pair; where even the C engine is under 2.5x "
                "the pure-Python peer, the goal cannot be met against this server on this "
                "machine, whatever the binding costs.")

    every = res.meta.get("backends") or BACKENDS
    lua_interps = ("lua5.4", "luajit")
    # ---- the goals of issue 26, in its order and words
    pb = res.get("python-vs-engine", backend="sqlite", variant="python/bare", metric="ratio_median")

    def pb_row(r):
        a = res.value("python-vs-engine", "sqlite", "python", "pairs_per_s", r["placement"])
        x = res.value("python-vs-engine", "sqlite", "bare", "pairs_per_s", r["placement"])
        # Truncated, not rounded: 0.8498 must not read as 0.850 beside "NOT met".
        v = math.floor(r["value"] * 1000) / 1000
        return f"{v:.3f} (`with lock:` {us(a):.1f} µs/pair, bare sqlite3 {us(x):.1f} µs)"

    ratio_goal("Python `with lock:` on embedded SQLite, default options, >= 0.85 of the bare "
               "sqlite3 program sending the same statements, measured side by side",
               pb, lambda v: v >= 0.85, pb_row,
               lambda m: ("The difference is the whole binding and engine per pair: the Python "
                          "with-block, the engine's own work (owner from getrandom, the lease, "
                          "auto-renewal's bookkeeping) around the same two statements"
                          + spread("python-vs-engine", m[0], 0.85) + "."),
               "the Python comparison or the bare program (libllbench.so) did not run",
               expect=["sqlite"])
    ratio_goal("Engine >= 0.95 of bare on every backend",
               res.get("engine-vs-bare", metric="ratio_median"), lambda v: v >= 0.95, lbl,
               engine_why, "the core benchmarks did not run", expect=every)
    ratio_goal("`auto_renew` on <= 3% slower than off (every backend)",
               res.get("auto-renew", variant="on/off", metric="ratio_median"),
               lambda v: v >= 0.97, lbl,
               lambda m: ("Taking a lease into renewal and out again should cost no wake-up of "
                          "the renewal thread (csrc/renew.c)."),
               "the core benchmarks did not run", expect=every)
    py = res.get("python-vs-engine", variant="python/engine", metric="ratio_median")
    lua = [r for r in res.get("lua-vs-engine", metric="ratio_median")]
    ratio_goal("Python `with lock:` >= 0.95 of the engine, every backend", py,
               lambda v: v >= 0.95, lbl,
               binding_why("python-vs-engine", "the with-block (python/with.c: the extension's "
                                                 "__enter__ and __exit__)"),
               "the Python comparison did not run", expect=every)
    ratio_goal("Lua `lock:with` >= 0.95 of the engine (Lua 5.4 and LuaJIT), every backend", lua,
               lambda v: v >= 0.95,
               lambda r: f"{r['variant'].split()[0]} {lbl(r)}",
               binding_why("lua-vs-engine", "lock:with (the closure call, the lease userdata)"),
               "the Lua comparison did not run",
               expect=[f"{i} {b}" for i in lua_interps for b in every],
               key=lambda r: f"{r['variant'].split()[0]} {r['backend']}")
    cron = res.get("alternatives-cron", variant="leaselock run/flock(1)", metric="ratio_median")
    ratio_goal("`leaselock run KEY -- true` on SQLite <= 2x `flock FILE true` per run, process "
               "start included",
               [dict(r, value=1 / r["value"]) for r in cron if r["value"]],
               lambda v: v <= 2.0, lambda r: f"{r['value']:.2f}x",
               lambda m: ("The CLI's start (dynamic loading), the database's open and schema "
                          "check, the acquire and release and the child's fork and exec, each "
                          "shown in the cron table."), "the cron comparison did not run")
    ratio_goal("`import leaselock` <= 1.5x `import sqlite3`",
               res.get("startup", variant="import leaselock/import sqlite3",
                       metric="ratio_median"),
               lambda v: v <= 1.5, lambda r: f"{r['value']:.2f}x",
               lambda m: "What the import loads: python -X importtime -c 'import leaselock'.",
               "the start-up comparison did not run")
    ratio_goal("`require \"leaselock\"` <= 3x the bare interpreter's start (Lua 5.4, LuaJIT)",
               [r for r in res.get("startup", metric="ratio_median")
                if r["variant"].endswith("require/alone")],
               lambda v: v <= 3.0, lambda r: f"{r['variant'].split()[0]} {r['value']:.2f}x",
               lambda m: "The shared libraries the module maps (ldd on it).",
               "the start-up comparison did not run", expect=lua_interps,
               key=lambda r: r["variant"].split()[0])
    fair_rows = ([dict(r, kind="engine") for r in
                  res.get("fair-mode", variant="fair/plain", metric="ratio_median")] +
                 [dict(r, kind="Python") for r in
                  res.get("safety", variant="fair on/off", metric="ratio_median")])

    def fair_why(misses):
        parts = []
        for r in misses:
            if r["kind"] != "engine":
                continue
            st = res.value("fair-mode", r["backend"], "fair", "statements_per_pair", r["placement"])
            if st is not None:
                parts.append(f"{r['backend']}{' (' + r['placement'] + ')' if r['placement'] else ''}"
                             f": {st:.2f} statements per fair pair (plain: 2)")
        return ("Judged on both the engine (bench_modes in bench/core_*.c: fair beside plain, "
                "auto_renew off) and Python `with lock:` (cost of safety: fair=True beside the "
                "default). " + ("; ".join(parts) + "." if parts else ""))

    ratio_goal("Fair mode uncontended >= 0.9 of plain on every backend", fair_rows,
               lambda v: v >= 0.9, lambda r: f"{r['kind']} {lbl(r)}", fair_why,
               "the core benchmarks and the cost-of-safety comparison did not run", expect=every)
    contention_goal(res, out, noisy, every, "8 processes in fair mode: useful throughput >= 0.7 "
                    "with fairness >= 0.9 (every backend)", "fair-procs", 8,
                    [("useful", 0.7), ("fairness", 0.9)])
    contention_goal(res, out, noisy, every, "32 processes, default mode: useful throughput >= "
                    "0.75 on every backend", "procs", 32, [("useful", 0.75)])
    out.append(nothing_slower(res, noisy))
    res.meta["issue-goals"] = len(out)
    # ---- earlier goals, kept
    ratio_goal("Python >= 2.5x the pure-Python implementation, each server backend, both placements",
               res.get("python-vs-engine", variant="python/peer", metric="ratio_median"),
               lambda v: v >= 2.5, lambda r: f"{r['backend']} ({r['placement']}) {r['value']:.2f}x",
               peer_why, "no server backend, or its peer's driver missing")
    ratio_goal("Uncontended, leaselock on embedded SQLite faster than redis-py's Lock on local Redis",
               res.get("alternatives-uncontended", variant="leaselock sqlite/redis-py Lock",
                       metric="ratio_median"),
               lambda v: v > 1.0, lambda r: f"{r['value']:.2f}x ({r['placement']} Redis)",
               lambda m: ("An SQLite write (WAL append, fsync-free with synchronous=NORMAL) is "
                          "compared with two Redis round trips over loopback."),
               "no local Redis (redis-server missing)")
    fair = {r["variant"]: r["value"] for r in res.get("alternatives-fairness", metric="fairness")}
    ll = fair.get("leaselock sqlite")
    others = {k: v for k, v in fair.items() if k in ("redis-py Lock", "python-redis-lock", "filelock")}
    if ll is None or len(others) < 3:
        out.append(("8-process contention: fairer than both Redis locks and filelock",
                    "not measured" if ll is None else "partly measured",
                    ", ".join(f"{k} {v:.2f}" for k, v in fair.items()) or "–",
                    "Redis or a worker missing: see the notes."))
    else:
        fig = f"leaselock {ll:.2f} vs " + ", ".join(f"{k} {v:.2f}" for k, v in others.items())
        if "leaselock sqlite fair" in fair:
            fig += f" (fair mode {fair['leaselock sqlite fair']:.2f})"
        beaten = [k for k, v in others.items() if v >= ll]
        out.append(("8-process contention: fairer than both Redis locks and filelock",
                    "met" if not beaten else "NOT met", fig,
                    "" if not beaten else f"As fair or fairer: {', '.join(beaten)}. Fairness is "
                    "fewest/most grants per process over the cell." + noisy))
    ratio_goal("100,000 live keys within 1.1x of the 100-key latency, every backend",
               res.get("scale", metric="ratio_median"), lambda v: v <= 1.1,
               lambda r: f"{r['backend']} {r['value']:.3f}",
               lambda m: scale_why(res, m),
               "the scale comparison did not run")
    mem = res.get("memory", metric="growth_after_warmup")
    cyc = res.value("memory", metric="cycles")
    if not mem:
        out.append(("Resident memory grows < 1 MB over 1,000,000 cycles (Python, Lua)",
                    "not measured", "–", "the memory comparison did not run"))
    else:
        fig = "; ".join(f"{r['variant']} {r['value'] * 1024:+.0f} KiB" for r in mem)
        fig += f" over {cyc:,} cycles (after the first 1%)"
        bad = [r for r in mem if r["value"] * 1048576 >= 1e6]
        status = "met" if not bad else "NOT met"
        why = ""
        if bad:
            why = "Grows in: " + ", ".join(r["variant"] for r in bad) + "."
        if cyc and cyc < 1_000_000:
            status += " (quick run)"
            why += f" Only {cyc:,} cycles in this run (BENCH_QUICK=1); the goal is for 1,000,000."
        out.append(("Resident memory grows < 1 MB over 1,000,000 cycles (Python, Lua)", status,
                    fig, why.strip()))
    return out


# ---- plots -------------------------------------------------------------------

def bar_groups(ax, groups, series, values, goal=None, ylabel="", log=False):
    """groups: x labels; series: names; values[(group, series)] -> value."""
    n = max(1, len(series))
    w = 0.8 / n
    for i, s in enumerate(series):
        xs, ys = [], []
        for j, g in enumerate(groups):
            v = values.get((g, s))
            if v is not None:
                xs.append(j - 0.4 + w * (i + 0.5))
                ys.append(v)
        ax.bar(xs, ys, w, label=s)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    if goal is not None:
        ax.axhline(goal, color="red", linestyle="--", linewidth=1, label=f"goal {goal:g}")
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)


def plot_overhead(res, out):
    rows = (res.get("engine-vs-bare", metric="ratio_median") +
            res.get("python-vs-engine", variant="python/engine", metric="ratio_median") +
            res.get("lua-vs-engine", metric="ratio_median"))
    peer = res.get("python-vs-engine", variant="python/peer", metric="ratio_median")
    if not rows and not peer:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    groups, values, series = [], {}, []
    for r in rows:
        g = r["backend"] + ("\n" + r["placement"] if r["placement"] else "")
        s = {"engine/bare": "engine / bare"}.get(r["variant"], r["variant"])
        s = s.replace(" lock:with/engine", " lock:with / engine").replace("python/engine",
                                                                           "python with / engine")
        if g not in groups:
            groups.append(g)
        if s not in series:
            series.append(s)
        values[(g, s)] = r["value"]
    # One goal line: 0.95 for the engine against bare and for the bindings against the engine.
    bar_groups(axes[0], groups, series, values, goal=0.95, ylabel="ratio (median of paired rounds)")
    axes[0].set_ylim(0, max([1.2] + [v * 1.1 for v in values.values()]))
    axes[0].set_title("Overhead: engine vs bare, bindings vs engine")
    axes[0].legend(fontsize=7)
    g2 = [r["backend"] + "\n" + r["placement"] for r in peer]
    bar_groups(axes[1], g2, ["python with / pure-Python peer"],
               {(g, "python with / pure-Python peer"): r["value"] for g, r in zip(g2, peer)},
               goal=2.5, ylabel="ratio (x)")
    axes[1].set_title("Python binding vs pure-Python peer")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "overhead.png"), dpi=90)
    plt.close(fig)
    return "overhead.png"


def plot_alternatives(res, out):
    un = res.get("alternatives-uncontended", metric="pairs_per_s")
    fa = res.get("alternatives-fairness", metric="fairness")
    cr = res.get("alternatives-cron", metric="ms_per_run")
    if not (un or fa or cr):
        return None
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    places = sorted({r["placement"] for r in un})
    sides = []
    for r in un:
        if r["variant"] not in sides:
            sides.append(r["variant"])
    bar_groups(axes[0], sides, places, {(r["variant"], r["placement"]): r["value"] for r in un},
               ylabel="acquire+release pairs/s", log=True)
    axes[0].set_title("Uncontended, one process (Redis placement)")
    axes[0].tick_params(axis="x", labelrotation=20)
    names = [r["variant"] for r in fa]
    axes[1].bar(range(len(fa)), [r["value"] for r in fa],
                color=["tab:green" if n.startswith("leaselock") else "tab:gray" for n in names])
    axes[1].set_xticks(range(len(fa)))
    axes[1].set_xticklabels(names, fontsize=8, rotation=20)
    axes[1].set_ylim(0, 1.05)
    axes[1].set_ylabel("fairness (fewest / most grants)")
    axes[1].set_title("8 processes on one key, hold 1 ms")
    axes[1].grid(axis="y", alpha=0.3)
    axes[2].bar(range(len(cr)), [r["value"] for r in cr])
    axes[2].set_xticks(range(len(cr)))
    axes[2].set_xticklabels([r["variant"] for r in cr], fontsize=8)
    axes[2].set_ylabel("ms per run (process start included)")
    axes[2].set_title("Cron style: CMD = true")
    axes[2].grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "alternatives.png"), dpi=90)
    plt.close(fig)
    return "alternatives.png"


CONTENTION_METRICS = [("useful", "throughput / ideal"), ("fairness", "fairness (fewest/most)"),
                      ("handoff_p50", "hand-off p50 (ms)"), ("handoff_p99", "hand-off p99 (ms)")]


def contention_metrics(res):
    have = {r["metric"] for r in res.get("contention")}
    ms = [m for m in CONTENTION_METRICS if m[0] in have]
    for m in sorted(have):  # requests per grant, under whatever name it gets
        if (("req" in m.lower() or "per_grant" in m.lower() or "tries" in m.lower())
                and m not in [x[0] for x in ms]):
            ms.append((m, m.replace("_", " ")))
    return ms


def plot_contention(res, out):
    rows = res.get("contention")
    if not rows:
        return None
    bes = [b for b in BACKENDS if any(r["backend"] == b for r in rows)]
    ms = contention_metrics(res)
    fig, axes = plt.subplots(len(ms), len(bes), figsize=(3.6 * len(bes), 2.6 * len(ms)),
                             squeeze=False)
    for j, b in enumerate(bes):
        for i, (m, title) in enumerate(ms):
            ax = axes[i][j]
            modes = {}
            for r in rows:
                if r["backend"] == b and r["metric"] == m:
                    mode, _, n = r["variant"].rpartition(" n=")
                    try:
                        modes.setdefault(mode, []).append((int(n), r["value"]))
                    except ValueError:
                        pass
            for mode, pts in modes.items():
                pts.sort()
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=mode)
            ax.set_xscale("log", base=2)
            ax.set_xticks([2, 8, 32])
            ax.set_xticklabels(["2", "8", "32"])
            if m in ("useful", "fairness"):
                ax.set_ylim(0, 1.05)
            ax.grid(alpha=0.3)
            if i == 0:
                ax.set_title(b)
            if j == 0:
                ax.set_ylabel(title, fontsize=8)
            if i == len(ms) - 1:
                ax.set_xlabel("workers")
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "contention.png"), dpi=90)
    plt.close(fig)
    return "contention.png"


def plot_scale(res, out):
    rows = res.get("scale", metric="latency_us")
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    bes = [b for b in BACKENDS if any(r["backend"] == b for r in rows)]
    bar_groups(ax, bes, ["100 keys", "100000 keys"],
               {(r["backend"], r["variant"]): r["value"] for r in rows},
               ylabel="us per acquire+release (engine)")
    ax.set_title("Scale: live keys in the store")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scale.png"), dpi=90)
    plt.close(fig)
    return "scale.png"


def plot_memory(res, out):
    curves = {k[len("memory-"):]: v for k, v in res.series.items() if k.startswith("memory-")}
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, pts in curves.items():
        ax.plot([p[0] for p in pts], [p[1] / 1024 for p in pts], label=k)
    ax.set_xlabel("acquire+release cycles")
    ax.set_ylabel("resident memory (MiB)")
    ax.set_title("Memory over the run (embedded SQLite)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "memory.png"), dpi=90)
    plt.close(fig)
    return "memory.png"


def plot_safety(res, out):
    rows = res.get("safety", metric="pairs_per_s")
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    bes = [b for b in BACKENDS if any(r["backend"] == b for r in rows)]
    base = {r["backend"]: r["value"] for r in rows if r["variant"] == "auto_renew on"}
    variants = []
    for r in rows:
        if r["variant"] not in variants:
            variants.append(r["variant"])
    bar_groups(ax, bes, variants,
               {(r["backend"], r["variant"]): r["value"] / base[r["backend"]] for r in rows
                if base.get(r["backend"])}, ylabel="pairs/s relative to the default")
    ax.set_title("Cost of safety (Python with lock:)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "safety.png"), dpi=90)
    plt.close(fig)
    return "safety.png"


# ---- markdown ------------------------------------------------------------------

def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        out.append("| " + " | ".join(str(x) for x in r) + " |")
    return "\n".join(out)


def notes(res, *comparisons):
    out = []
    for c in comparisons:
        for n in res.notes.get(c, []):
            out.append(f"- Note ({c}): {n}")
    return ("\n" + "\n".join(out) + "\n") if out else ""


def img(name):
    return f"\n![{name}](bench/{name})\n" if name else ""


def write(res, out_dir, path):
    m = res.meta
    pics = {}
    for name, fn in [("overhead", plot_overhead), ("alternatives", plot_alternatives),
                     ("contention", plot_contention), ("scale", plot_scale),
                     ("memory", plot_memory), ("safety", plot_safety)]:
        try:
            pics[name] = fn(res, out_dir)
        except Exception as e:  # a plot that fails leaves its table
            res.note(name, f"plot failed: {type(e).__name__}: {e}")
            pics[name] = None
    L = []
    L.append("# Benchmarks\n")
    L.append("Written by `make bench` (bench/report/run.py); do not edit by hand. Raw numbers: "
             "[bench/results.csv](bench/results.csv) (one row per figure: comparison, backend, "
             "variant, metric, value, unit, placement)" +
             (", [bench/memory.csv](bench/memory.csv)" if os.path.exists(os.path.join(out_dir, "memory.csv")) else "") +
             (", [bench/contention.txt](bench/contention.txt) (`make bench-contention`'s table)"
              if os.path.exists(os.path.join(out_dir, "contention.txt")) else "") + ".\n")
    if m.get("quick"):
        L.append("> **BENCH_QUICK=1 run**: short rounds, 20,000 memory cycles, 1 s contention "
                 "cells. These figures check that the benchmark works; they are not the "
                 "project's figures. Run `make bench` for those.\n")
    L.append("## When, where, what\n")
    L.append(table(["", ""], [
        ["date", m.get("date", "?")],
        ["machine", f"{m.get('cpu')}, {m.get('cpus')} CPUs, {m.get('memory')}, "
                    f"{m.get('os')}, Linux {m.get('kernel')}, virtualization: {m.get('virt')}"],
        ["load average (1, 5, 15 min)", f"{m.get('load_start')} at the start, {m.get('load_end')} at the end"],
        ["run time", f"{m.get('seconds')} s (" + ", ".join(
            f"{k[len('seconds-'):]} {v} s" for k, v in m.items() if k.startswith("seconds-")) + ")"],
        ["leaselock", m.get("leaselock")],
        ["Python, SQLite", f"CPython {m.get('python')}, SQLite {m.get('sqlite')}"],
        ["Lua", f"{m.get('lua5.4')}; {m.get('luajit')}"],
        ["servers", "; ".join(m[k] for k in ("server-mongodb", "server-mysql", "server-postgresql") if k in m)
         + f"; Redis {m.get('redis-server')} — all on 127.0.0.1, started and stopped by the run"],
        ["Python packages", m.get("packages")],
        ["flock", m.get("flock")],
    ]) + "\n")
    L.append("## Method\n")
    L.append(
        "- **Interleaved pairs.** Every comparison runs its sides in rounds A, B, A, B… (the "
        "first side alternating), in the same run on the same server; each round's ratio is "
        "taken against the other side's round beside it, and the **median of those paired "
        "ratios** is the figure. Rates (pairs/s) are medians of rounds.\n"
        "- **Placement.** The client is pinned to CPU 0 for the uncontended comparisons. Each "
        "server comparison runs twice (bench/place-servers.sh): with the database servers' "
        "threads on the other CPU (`other-cpu`: every round trip pays a cross-CPU wake-up, as "
        "with a server on another host) and on the client's CPU (`client-cpu`: what the "
        "clients themselves cost). Scale and cost-of-safety use `client-cpu`, the steadier. "
        "Contention and fairness runs are not pinned.\n"
        "- **Pair** = one acquire (one try, TTL 30 s) and its release. The engine side is "
        "`leaselock_acquire` + `leaselock_lease_release` in C: bench/core_*.c for the bare "
        "comparison (no auto-renewal, as the bare programs), bench/python/core_loop.c (the "
        "options `with lock:` uses) for the bindings. On SQLite, `with lock:` also runs beside "
        "the bare sqlite3 program itself (bench/bare_sqlite.h), in the same rounds.\n"
        "- **Nothing else slower** is judged " + HOLD_TEXT + ".\n"
        "- **The machine is shared**: other builds and tests may run beside the benchmark "
        "(see the load average above); interleaving makes both sides of a ratio see the same "
        "load, but absolute rates move with it.\n")
    L.append("## Goals\n")
    gl = goals(res)
    n26 = m.get("issue-goals")
    if n26:
        L.append(f"The first {n26} rows are the goals of issue 26 (speed where users feel it), "
                 "as it states them; the rest are earlier goals the report still checks. "
                 "\"Partly measured\" means a backend or interpreter the goal is about gave no "
                 "figure in this run (its note says why).\n")
    L.append(table(["goal", "status", "figure", "why"],
                   [[g, f"**{s}**" if s.startswith("NOT") else s, f, w] for g, s, f, w in gl]) + "\n")

    # 1. overhead
    L.append("## 1. Overhead (uncontended acquire+release pairs/s)\n")
    L.append(img(pics.get("overhead")))
    rows = []
    for r in res.get("engine-vs-bare", metric="ratio_median"):
        e = res.value("engine-vs-bare", r["backend"], "engine", placement=r["placement"])
        b = res.value("engine-vs-bare", r["backend"], "bare", placement=r["placement"])
        rows.append([r["backend"], where(r["placement"]), fmt(e), fmt(b), fmt(r["value"], "ratio")])
    if rows:
        L.append("**Engine vs a bare program** sending the same statements (plain sqlite3, "
                 "libmongoc, libmariadb, libpq; the bench-core programs, bench/core_*.c):\n")
        L.append(table(["backend", "placement", "engine pairs/s", "bare pairs/s",
                        "engine/bare (median of paired rounds)"], rows) + "\n")
    rows = []
    for r in res.get("auto-renew", variant="on/off", metric="ratio_median"):
        on = res.value("auto-renew", r["backend"], "on", "us_per_pair", r["placement"])
        off = res.value("auto-renew", r["backend"], "off", "us_per_pair", r["placement"])
        rows.append([r["backend"], where(r["placement"]), fmt(on, "us"), fmt(off, "us"),
                     fmt(r["value"], "ratio")])
    if rows:
        L.append("**Auto-renewal's cost**: the engine with `auto_renew` on (the default) beside "
                 "off, interleaved rounds in the same bench-core program:\n")
        L.append(table(["backend", "placement", "on µs/pair", "off µs/pair",
                        "on/off (median of paired rounds)"], rows) + "\n")
    rows = []
    for r in res.get("fair-mode", variant="fair/plain", metric="ratio_median"):
        b, p = r["backend"], r["placement"]
        rows.append([b, where(p), fmt(res.value("fair-mode", b, "fair", "pairs_per_s", p)),
                     fmt(res.value("fair-mode", b, "fair", "statements_per_pair", p)),
                     fmt(r["value"], "ratio")])
    if rows:
        L.append("**Fair mode, uncontended**: the engine's fair acquire + release beside the "
                 "plain lock's (auto_renew off, nobody queued), interleaved rounds in the same "
                 "bench-core program (bench_modes, bench/bench.h); Python's `fair=True` beside "
                 "the default is in section 6:\n")
        L.append(table(["backend", "placement", "fair pairs/s", "statements per pair",
                        "fair/plain (median of paired rounds)"], rows) + "\n")
    pb = res.get("python-vs-engine", backend="sqlite", variant="python/bare", metric="ratio_median")
    if pb:
        L.append("**Python `with lock:` vs the bare sqlite3 program** on embedded SQLite: the "
                 "default options (auto_renew on) beside the bare program of bench-core-sqlite "
                 "(bench/bare_sqlite.h: the engine's two statements and pragmas, plain sqlite3 "
                 "API, loaded from libllbench.so through ctypes), on the same file, interleaved "
                 "with the rows below:\n")
        L.append(table(["with lock: pairs/s", "bare sqlite3 pairs/s",
                        "with lock:/bare (median of paired rounds)"],
                       [[fmt(res.value("python-vs-engine", "sqlite", "python", "pairs_per_s", "")),
                         fmt(res.value("python-vs-engine", "sqlite", "bare", "pairs_per_s", "")),
                         fmt(r["value"], "ratio")] for r in pb]) + "\n")
    rows = []
    for r in res.get("python-vs-engine", metric="pairs_per_s", variant="python"):
        b, p = r["backend"], r["placement"]
        rows.append([b, where(p), fmt(r["value"]),
                     fmt(res.value("python-vs-engine", b, "engine", placement=p)),
                     fmt(res.value("python-vs-engine", b, "python/engine", placement=p), "ratio"),
                     fmt(res.value("python-vs-engine", b, "peer", placement=p)),
                     fmt(res.value("python-vs-engine", b, "python/peer", placement=p), "ratio"),
                     fmt(res.value("python-vs-engine", b, "engine/peer", placement=p), "ratio")])
    if rows:
        L.append("**Python `with lock:` vs the engine, and vs a pure-Python implementation** of "
                 "the same protocol on the backend's usual driver (bench/peers/: pymongo; PyMySQL "
                 "and psycopg 3 sending the engine's own statements, read from csrc/stmt_mysql.c and csrc/stmt_postgresql.c), "
                 "same server, same table:\n")
        L.append(table(["backend", "placement", "with lock: pairs/s", "engine pairs/s",
                        "python/engine", "pure-Python pairs/s", "python/pure-Python",
                        "engine/pure-Python"], rows) + "\n")
        drivers = [m[k] for k in ("peer-mongodb", "peer-mysql", "peer-postgresql") if k in m]
        if drivers:
            L.append("Peers' drivers: " + ", ".join(drivers) + ".\n")
    rows = []
    for r in res.get("lua-vs-engine", metric="ratio_median"):
        interp = r["variant"].split()[0]
        b, p = r["backend"], r["placement"]
        rows.append([interp, b, where(p),
                     fmt(res.value("lua-vs-engine", b, f"{interp} lock:with", placement=p)),
                     fmt(res.value("lua-vs-engine", b, f"{interp} engine", placement=p)),
                     fmt(r["value"], "ratio")])
    if rows:
        L.append("**Lua `lock:with` vs the engine** (bench/lua/bench_with.lua, `make bench-lua`; "
                 "the ratio is of the two sides' median rounds):\n")
        L.append(table(["interpreter", "backend", "placement", "lock:with pairs/s",
                        "engine pairs/s", "lock:with/engine"], rows) + "\n")
    L.append(notes(res, "engine-vs-bare", "python-vs-engine", "lua-vs-engine"))

    # 2. alternatives
    L.append("## 2. What users pick instead\n")
    L.append(img(pics.get("alternatives")))
    rows = [[r["variant"], where(r["placement"]) if r["placement"] else "", fmt(r["value"])]
            for r in res.get("alternatives-uncontended", metric="pairs_per_s")]
    if rows:
        L.append("**Uncontended pairs/s in one process**: leaselock `with lock:` on embedded "
                 "SQLite (the default, WAL), `filelock.FileLock` on a local file, redis-py's "
                 "`Lock` (`r.lock(key, timeout=30)`) and python-redis-lock (`Lock(r, key, "
                 "expire=30)`) on a local redis-server (127.0.0.1, own port and directory, no "
                 "persistence). The placement column is Redis's:\n")
        L.append(table(["lock", "Redis placement", "pairs/s"], rows) + "\n")
        rr = res.get("alternatives-uncontended", metric="ratio_median")
        if rr:
            L.append(table(["ratio", "Redis placement", "median of paired rounds"],
                           [[r["variant"], where(r["placement"]), fmt(r["value"], "ratio")]
                            for r in rr]) + "\n")
    fa = res.get("alternatives-fairness", metric="fairness")
    if fa:
        L.append(f"**Contention, 8 processes** ({m.get('fairness-setup', '')}; each process: "
                 "blocking acquire with the library's default wait, hold, release; fairness = "
                 "fewest / most grants per process, medians over rounds):\n")
        rows = []
        for r in fa:
            v = r["variant"]
            rows.append([v, fmt(r["value"]),
                         fmt(res.value("alternatives-fairness", "local", v, "grants_per_s")),
                         fmt(res.value("alternatives-fairness", "local", v, "wait_p50")),
                         fmt(res.value("alternatives-fairness", "local", v, "wait_p99"))])
        L.append(table(["lock", "fairness", "grants/s", "wait p50 (ms)", "wait p99 (ms)"], rows) + "\n")
    cr = res.get("alternatives-cron", metric="ms_per_run")
    if cr:
        L.append("**Cron style**: `flock FILE true` vs `leaselock --uri sqlite://… run KEY -- "
                 "true`, process start included, runs started one after another from Python; "
                 "`true` alone is the floor, and `leaselock --help` the CLI's own start (SQLite "
                 "linked in, as `make` builds it: mk/cli.mk; a server backend's module and "
                 "client library load at the first URI of its scheme):\n")
        L.append(table(["command", "ms per run", "runs/s"],
                       [[r["variant"], fmt(r["value"]),
                         fmt(res.value("alternatives-cron", "local", r["variant"], "runs_per_s"))]
                        for r in cr]) + "\n")
    L.append(notes(res, "alternatives-uncontended", "alternatives-fairness", "alternatives-cron",
                   "alternatives"))
    st = res.get("startup", metric="ms_per_run")
    if st:
        L.append("**Start-up**: a new process that loads leaselock beside one that does not, "
                 "each run one after another from Python, interleaved rounds (medians):\n")
        L.append(table(["process", "ms per run"], [[r["variant"], fmt(r["value"])] for r in st])
                 + "\n")
        L.append(table(["ratio", "median of paired rounds"],
                       [[r["variant"], f"{r['value']:.2f}"]
                        for r in res.get("startup", metric="ratio_median")]) + "\n")
    L.append(notes(res, "startup"))

    # 3. contention
    L.append("## 3. Contention (`make bench-contention`)\n")
    crow = res.get("contention")
    if crow:
        L.append(f"bench/contention.c through `make bench-contention` "
                 f"(CONTENTION_SECONDS={m.get('contention-seconds')}), its printed table read by "
                 f"column name (columns seen: {m.get('contention-columns', '?')}). Each worker: "
                 "blocking acquire, hold 1 ms, release; processes (one client each) and threads "
                 "(one shared client). Useful = throughput / ideal (1 / (hold + pair), the "
                 "hold and the acquire+release pair each measured alone, uncontended, in the "
                 "same run).\n")
        L.append(img(pics.get("contention")))
        ms = contention_metrics(res)
        rows = {}
        for r in crow:
            rows.setdefault((r["backend"], r["variant"]), {})[r["metric"]] = r["value"]
        L.append(table(["backend", "mode, workers"] + [t for _, t in ms],
                       [[b, v] + [fmt(d.get(k)) for k, _ in ms] for (b, v), d in rows.items()]) + "\n")
    L.append(notes(res, "contention"))

    # 4. scale
    L.append("## 4. Scale: 100 vs 100,000 live keys\n")
    sc = res.get("scale", metric="ratio_median")
    if sc:
        L.append("Two stores per backend (SQLite files; tables `bench_scale_100` and "
                 "`bench_scale_100000` through `?table=`; MongoDB collections through "
                 "`?leaselockCollection=`), filled in bulk with live records (held for a day) "
                 "through the backend's own driver; then the engine (core_loop.c) does "
                 "acquire+release pairs on one more key in each, interleaved.\n")
        L.append(img(pics.get("scale")))
        L.append(table(["backend", "100 keys (us/pair)", "100,000 keys (us/pair)",
                        "latency ratio (median of paired rounds)"],
                       [[r["backend"], fmt(res.value("scale", r["backend"], "100 keys")),
                         fmt(res.value("scale", r["backend"], "100000 keys")), fmt(r["value"], "ratio")]
                        for r in sc]) + "\n")
    L.append(notes(res, "scale"))

    # 5. memory
    L.append("## 5. Memory\n")
    mem = res.get("memory", metric="growth_after_warmup")
    if mem:
        L.append(f"Resident memory (/proc/self/statm) sampled 100 times over "
                 f"{res.value('memory', metric='cycles'):,} `with lock:` (Python) and "
                 "`lock:with` (Lua 5.4) acquire+release cycles on embedded SQLite, the two "
                 "processes side by side. Growth is counted from the first 1% of the cycles "
                 "(imports, caches, the first statements) to the end.\n")
        L.append(img(pics.get("memory")))
        L.append(table(["binding", "start (MiB)", "after 1% (MiB)", "end (MiB)", "growth (KiB)"],
                       [[r["variant"], fmt(res.value("memory", "sqlite", r["variant"], "rss_start")),
                         fmt(res.value("memory", "sqlite", r["variant"], "rss_after_1pct")),
                         fmt(res.value("memory", "sqlite", r["variant"], "rss_end")),
                         f"{r['value'] * 1024:+.0f}"] for r in mem]) + "\n")
    L.append(notes(res, "memory"))

    # 6. safety
    L.append("## 6. Cost of safety\n")
    sa = res.get("safety", metric="pairs_per_s")
    if sa:
        L.append("Python `with lock:` pairs/s with the default (auto_renew on, fair off), with "
                 "`auto_renew=False`, and with `fair=True` (auto_renew on), interleaved.\n")
        L.append(img(pics.get("safety")))
        bes = [b for b in BACKENDS if any(r["backend"] == b for r in sa)]
        variants = []
        for r in sa:
            if r["variant"] not in variants:
                variants.append(r["variant"])
        L.append(table(["backend"] + [f"{v} (pairs/s)" for v in variants] +
                       ["auto_renew off/on", "fair on/off"],
                       [[b] + [fmt(res.value("safety", b, v, "pairs_per_s")) for v in variants] +
                        [fmt(res.value("safety", b, "auto_renew off/on"), "ratio"),
                         fmt(res.value("safety", b, "fair on/off"), "ratio")] for b in bes]) + "\n")
    L.append(notes(res, "safety"))

    L.append("## Running it\n")
    L.append("`make bench` (not part of `make test`) installs what it needs (Debian packages "
             "through tools/deps.sh, `redis-server`, a venv under build/bench-venv from PyPI), "
             "starts the test servers (tests/with-servers.sh) and runs every comparison; "
             "`BENCH_QUICK=1 make bench` runs short ones to check that it works; "
             "`BENCH_ONLY=engine,python,lua,alternatives,contention,scale,memory,safety` "
             "picks some. The parts can still be run alone: `make bench-core`, "
             "`make bench-python`, `make bench-lua`, `make bench-contention`.\n")
    with open(path, "w") as f:
        f.write("\n".join(L))
