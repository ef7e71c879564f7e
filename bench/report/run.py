"""make bench: every comparison of docs/benchmarks.md in one run.

Started by `make bench` inside tests/with-servers.sh (MONGODB_URI, MYSQL_URI,
POSTGRESQL_URI and the servers' pids set), with the benchmark's venv
(matplotlib, redis, python-redis-lock, filelock, PyMySQL, psycopg, pymongo)
and the built extension on PYTHONPATH. Each comparison is a function that
adds rows (comparison, backend, variant, metric, value, unit, placement) to
docs/bench/results.csv; then the plots (docs/bench/*.png) and the report
(docs/benchmarks.md, with its goals table) are written from those rows.

Pairs are interleaved: rounds A, B, A, B... (the first side alternating),
each round's ratio taken against the other side's round beside it, and the
median of those ratios reported, so the machine's noise hits both alike.

BENCH_QUICK=1: short runs (for development and to check that make bench
works); BENCH_ONLY=name,name runs only those comparisons (the report then
holds only them). A benchmark reports; it never fails on a figure.
"""
import csv
import ctypes
import datetime
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
OUT_DIR = os.path.join(ROOT, "docs", "bench")
REPORT = os.path.join(ROOT, "docs", "benchmarks.md")
SERVER_BACKENDS = [("mongodb", "MONGODB_URI"), ("mysql", "MYSQL_URI"),
                   ("postgresql", "POSTGRESQL_URI")]

import leaselock  # noqa: E402  (the built extension, from PYTHONPATH)

from peers import driver_version, open_peer  # noqa: E402


def q(quick, full):
    """The size for this mode."""
    return quick if QUICK else full


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- results ----------------------------------------------------------------

class Results:
    FIELDS = ["comparison", "backend", "variant", "metric", "value", "unit", "placement"]

    def __init__(self):
        self.rows = []
        self.notes = {}    # comparison -> [text]
        self.series = {}   # name -> data for plots (memory curves)
        self.meta = {}
        self.previous = []  # the rows of the report being replaced (read_previous)

    def add(self, comparison, backend, variant, metric, value, unit, placement=""):
        self.rows.append(dict(comparison=comparison, backend=backend, variant=variant,
                              metric=metric, value=value, unit=unit, placement=placement))

    def note(self, comparison, text):
        self.notes.setdefault(comparison, []).append(text)
        log(f"{comparison}: {text}")

    def get(self, comparison, backend=None, variant=None, metric=None, placement=None):
        out = []
        for r in self.rows:
            if r["comparison"] != comparison:
                continue
            if backend is not None and r["backend"] != backend:
                continue
            if variant is not None and r["variant"] != variant:
                continue
            if metric is not None and r["metric"] != metric:
                continue
            if placement is not None and r["placement"] != placement:
                continue
            out.append(r)
        return out

    def value(self, *a, **k):
        rows = self.get(*a, **k)
        return rows[0]["value"] if rows else None

    def write_csv(self, path):
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.FIELDS)
            w.writeheader()
            for r in self.rows:
                v = r["value"]
                w.writerow({**r, "value": f"{v:.6g}" if isinstance(v, float) else v})


# ---- the machine: targets, placement, pinning ---------------------------------

def backends(tmp):
    """(name, uri) for SQLite (a file under TMP) and each server whose URI is set."""
    out = [("sqlite", f"sqlite://{tmp}/bench.db")]
    for name, var in SERVER_BACKENDS:
        uri = os.environ.get(var, "")
        if uri and uri != "unused":
            out.append((name, uri))
    return out


NCPU = os.cpu_count() or 1
ALL_CPUS = set(range(NCPU))


def pin_client():
    """The client on CPU 0, as the bench-* targets pin it (BENCH_PIN)."""
    os.sched_setaffinity(0, {0})


def unpin_client():
    os.sched_setaffinity(0, ALL_CPUS)


def placements():
    """[(label, cpus)]: the servers on the other CPUs, then on the client's
    (bench/run.sh's two placements); one unplaced run when that cannot be."""
    have = any(os.environ.get(v) for v in ("LEASELOCK_MONGO_SERVER_PID",
                                           "LEASELOCK_MYSQL_SERVER_PID",
                                           "LEASELOCK_POSTGRESQL_SERVER_PID"))
    if NCPU < 2 or not have or not shutil.which("taskset"):
        return [("unplaced", None)]
    others = "1" if NCPU == 2 else f"1-{NCPU - 1}"
    return [("other-cpu", others), ("client-cpu", "0")]


def place_servers(cpus):
    """Moves the test servers' threads to CPUS (bench/place-servers.sh)."""
    if cpus is None:
        return True
    r = subprocess.run(["bash", os.path.join(ROOT, "bench", "place-servers.sh"), cpus],
                       capture_output=True, text=True)
    return r.returncode == 0


def spread_servers():
    place_servers(f"0-{NCPU - 1}" if NCPU > 1 else "0")


PLACE_TEXT = {"other-cpu": "servers on the other CPU", "client-cpu": "servers on the client's CPU",
              "unplaced": "servers left to the scheduler", "": ""}


# ---- interleaving -------------------------------------------------------------

def interleave(sides, rounds):
    """SIDES: {name: fn() -> rate}. Runs ROUNDS rounds of every side, the
    order rotating each round. Returns {name: [rate per round]}."""
    names = list(sides)
    out = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        order = names[k:] + names[:k]
        if r % 2:
            order.reverse()
        for n in order:
            out[n].append(sides[n]())
    return out


def paired_ratio(a, b):
    """Median of the per-round ratios a[i] / b[i]."""
    return statistics.median(x / y for x, y in zip(a, b))


def add_ratio(res, comparison, backend, variant, a, b, unit="ratio", placement="", invert=False):
    """Adds the median of the paired ratios a[i] / b[i] (b[i] / a[i] with
    INVERT) and their quartiles (ratio_p25, ratio_p75: the rounds' spread)."""
    r = sorted((y / x if invert else x / y) for x, y in zip(a, b))
    res.add(comparison, backend, variant, "ratio_median", statistics.median(r), unit, placement)
    if len(r) >= 4:
        qs = statistics.quantiles(r, n=4)
        res.add(comparison, backend, variant, "ratio_p25", qs[0], unit, placement)
        res.add(comparison, backend, variant, "ratio_p75", qs[2], unit, placement)


# ---- the C core's loop (bench/python/core_loop.c, through ctypes) -------------

_core = None


def core_loop():
    global _core
    if _core is None:
        lib = ctypes.CDLL(os.path.join(BUILD, "bench", "python", "libllbench.so"))
        fn = lib.llbench_core_loop
        fn.restype = ctypes.c_double
        fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_longlong,
                       ctypes.c_char_p, ctypes.c_size_t]
        _core = fn
    return _core


def rate_core(uri, key, n):
    k = key.encode()
    err = ctypes.create_string_buffer(512)
    s = core_loop()(uri.encode(), k, len(k), n, err, len(err))
    if s < 0:
        raise RuntimeError(f"core loop: {err.value.decode(errors='replace')}")
    return n / s


class BareSqlite:
    """The bare sqlite3 program of bench/core_sqlite.c (bench/bare_sqlite.h,
    in libllbench.so) on the file PATH, open until close()."""

    def __init__(self, path):
        lib = ctypes.CDLL(os.path.join(BUILD, "bench", "python", "libllbench.so"))
        self.fopen, self.fpairs, self.fclose = (lib.llbench_bare_sqlite_open,
                                                lib.llbench_bare_sqlite_pairs,
                                                lib.llbench_bare_sqlite_close)
        self.fopen.restype = ctypes.c_void_p
        self.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        self.fpairs.restype = ctypes.c_double
        self.fpairs.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_longlong,
                                ctypes.c_char_p, ctypes.c_size_t]
        self.fclose.argtypes = [ctypes.c_void_p]
        self.err = ctypes.create_string_buffer(512)
        self.h = self.fopen(path.encode(), self.err, len(self.err))
        if not self.h:
            raise RuntimeError(f"bare sqlite3: {self.err.value.decode(errors='replace')}")

    def rate(self, key, n):
        s = self.fpairs(self.h, key.encode(), n, self.err, len(self.err))
        if s < 0:
            raise RuntimeError(f"bare sqlite3: {self.err.value.decode(errors='replace')}")
        return n / s

    def close(self):
        self.fclose(self.h)
        self.h = None


def rate_with(lock, n):
    t = time.perf_counter()
    for _ in range(n):
        with lock:
            pass
    return n / (time.perf_counter() - t)


def rate_peer(peer, key, n):
    t = time.perf_counter()
    for _ in range(n):
        owner, _ = peer.acquire(key)
        if not peer.release(key, owner):
            raise RuntimeError("peer release: not held")
    return n / (time.perf_counter() - t)


# ---- 1. overhead ----------------------------------------------------------------

CORE_LINE = re.compile(r"^(engine|bare)[^:]*:\s+(\d+) pairs/s")
CORE_RATIO = re.compile(r"ratio engine/bare: median of (\d+) rounds ([\d.]+), best rounds ([\d.]+), "
                        r"all rounds together ([\d.]+)")
# bench_auto_renew's lines (bench/bench.h): the engine with auto_renew on
# beside off, in the same program.
RENEW_US = re.compile(r"auto_renew on \(the default\): ([\d.]+) us/pair\s+auto_renew off: ([\d.]+) us/pair")
RENEW_RATIO = re.compile(r"ratio auto_renew on/off: median of (\d+) rounds ([\d.]+)")
# bench_modes' fair row (bench/bench.h): the fair mode, uncontended, beside
# the plain lock in the same program.
FAIR_ROW = re.compile(r"^\s+fair acquire \+ release\s+(\d+) pairs/s.*ratio to plain \(median\) "
                      r"([\d.]+)\s+statements/pair ([\d.]+)")


def overhead_engine(res, targets):
    """Engine vs the bare program: the bench-core programs (build/bench/core_*)."""
    c = "engine-vs-bare"
    pin_client()
    for name, uri in targets:
        exe = os.path.join(BUILD, "bench", f"core_{name}")
        if not os.path.exists(exe):
            res.note(c, f"{name}: {exe} not built, skipped")
            continue
        if name == "sqlite":
            runs, args = [("", None)], [str(q(1000, 5000)), str(q(6, 20))]
        else:
            runs, args = placements(), [uri, str(q(100, 200)), str(q(10, 61))]
        for label, cpus in runs:
            if not place_servers(cpus):
                res.note(c, f"{name}: servers not placed on CPU {cpus}")
            log(f"{c}: {name} {label}")
            env = dict(os.environ, SQLITE_BENCH_DIR=tempfile.gettempdir())
            p = subprocess.run([exe] + args, capture_output=True, text=True, env=env)
            if p.returncode != 0:
                res.note(c, f"{name} {label}: failed: {p.stderr.strip()[:300]}")
                continue
            for line in p.stdout.splitlines():
                m = CORE_LINE.match(line)
                if m:
                    res.add(c, name, m.group(1), "pairs_per_s", float(m.group(2)), "pairs/s", label)
                m = CORE_RATIO.search(line)
                if m:
                    res.add(c, name, "engine/bare", "ratio_median", float(m.group(2)), "ratio", label)
                    res.add(c, name, "engine/bare", "ratio_best_rounds", float(m.group(3)), "ratio",
                            label)
                    res.add(c, name, "engine/bare", "ratio_all_rounds", float(m.group(4)), "ratio",
                            label)
                m = RENEW_US.search(line)
                if m:
                    res.add("auto-renew", name, "on", "us_per_pair", float(m.group(1)), "us", label)
                    res.add("auto-renew", name, "off", "us_per_pair", float(m.group(2)), "us", label)
                m = FAIR_ROW.match(line)
                if m:
                    res.add("fair-mode", name, "fair", "pairs_per_s", float(m.group(1)), "pairs/s",
                            label)
                    res.add("fair-mode", name, "fair/plain", "ratio_median", float(m.group(2)),
                            "ratio", label)
                    res.add("fair-mode", name, "fair", "statements_per_pair", float(m.group(3)), "",
                            label)
                m = RENEW_RATIO.search(line)
                if m:
                    res.add("auto-renew", name, "on/off", "ratio_median", float(m.group(2)), "ratio",
                            label)
    spread_servers()


def overhead_python(res, targets):
    """Python `with lock:` vs the engine (core_loop.c) vs the pure-Python
    peer; on SQLite, vs the bare sqlite3 program (bare_sqlite.h) too."""
    c = "python-vs-engine"
    pin_client()
    run_id = uuid.uuid4().hex[:8]
    for name, uri in targets:
        client = leaselock.connect(uri)
        lock = client.lock(f"bench/{run_id}/py")
        peer = bare = None
        if name == "sqlite":
            try:  # the same file, its schema made by the client above
                bare = BareSqlite(uri[len("sqlite://"):])
            except Exception as e:
                res.note(c, f"sqlite: the bare sqlite3 program unavailable: {e}")
        else:
            try:
                peer = open_peer(name, uri)
            except Exception as e:
                res.note(c, f"{name}: pure-Python peer unavailable: {e}")
        runs = [("", None)] if name == "sqlite" else placements()
        pairs = q(200, 500) if name == "sqlite" else q(100, 300)
        rounds = q(5, 31) if name == "sqlite" else q(5, 15)
        # Warm-up: connections, prepared statements, and mongo-java-server's
        # JIT, which needs a few thousand commands before its speed settles.
        warm = q(500, 3000) if name == "mongodb" else 100
        rate_with(lock, warm)
        rate_core(uri, f"bench/{run_id}/core", warm)
        if peer:
            try:
                rate_peer(peer, f"bench/{run_id}/peer", warm)
            except Exception as e:  # the peer's statements behind the engine's: the rest runs
                res.note(c, f"{name}: pure-Python peer failed, left out: {type(e).__name__}: {e}")
                peer.close()
                peer = None
        if bare:
            bare.rate(f"bench/{run_id}/bare", warm)
        for label, cpus in runs:
            place_servers(cpus)
            log(f"{c}: {name} {label}")
            sides = {"python": lambda: rate_with(lock, pairs),
                     "engine": lambda: rate_core(uri, f"bench/{run_id}/core", pairs)}
            if peer:
                sides["peer"] = lambda: rate_peer(peer, f"bench/{run_id}/peer", pairs)
            if bare:
                sides["bare"] = lambda: bare.rate(f"bench/{run_id}/bare", pairs)
            s = interleave(sides, rounds)
            for side, v in s.items():
                res.add(c, name, side, "pairs_per_s", statistics.median(v), "pairs/s", label)
            add_ratio(res, c, name, "python/engine", s["python"], s["engine"], placement=label)
            if peer:
                add_ratio(res, c, name, "python/peer", s["python"], s["peer"], placement=label)
                add_ratio(res, c, name, "engine/peer", s["engine"], s["peer"], placement=label)
            if bare:
                add_ratio(res, c, name, "python/bare", s["python"], s["bare"], placement=label)
        if bare:
            bare.close()
        if peer:
            res.meta[f"peer-{name}"] = driver_version(name)
            peer.close()
        client.close()
    spread_servers()


LUA_HEAD = re.compile(r"^lua (.+?)\s+(sqlite|mongodb|mysql|postgresql)\s+(\d+) pairs x (\d+) rounds")
LUA_ROW = re.compile(r"^\s+(lock:with|C core)\s+(\d+)\s+(\d+)")


def overhead_lua(res, targets):
    """Lua `lock:with` vs the engine: bench/lua/bench_with.lua (make bench-lua)."""
    c = "lua-vs-engine"
    pin_client()
    tmp = tempfile.mkdtemp(prefix="leaselock-bench-lua-")
    interps = [("lua5.4", "5.4"), ("luajit", "jit")]
    for interp, sub in interps:
        mod = os.path.join(BUILD, "lua", sub, "leaselock.so")
        bmod = os.path.join(BUILD, "bench", "lua", sub, "leaselock_bench.so")
        if not (shutil.which(interp) and os.path.exists(mod) and os.path.exists(bmod)):
            res.note(c, f"{interp}: interpreter or module not built, skipped")
            continue
        for i, (label, cpus) in enumerate(placements()):
            place_servers(cpus)
            log(f"{c}: {interp} {label}")
            env = dict(os.environ, LEASELOCK_BENCH_TMP=tmp,
                       LEASELOCK_BENCH_N=str(q(100, 300)), LEASELOCK_BENCH_ROUNDS=str(q(5, 31)),
                       LUA_CPATH=f"{BUILD}/lua/{sub}/?.so;{BUILD}/bench/lua/{sub}/?.so")
            p = subprocess.run([interp, os.path.join(ROOT, "bench", "lua", "bench_with.lua")],
                               capture_output=True, text=True, env=env)
            if p.returncode != 0:
                res.note(c, f"{interp} {label}: failed: {p.stderr.strip()[:300]}")
            cur, vals, best = None, {}, {}
            for line in p.stdout.splitlines() + ["lua end sqlite 0 pairs x 0 rounds"]:
                m = LUA_HEAD.match(line)
                if m:
                    if cur and "lock:with" in vals and "C core" in vals:
                        bname = cur
                        if not (i > 0 and bname == "sqlite"):
                            where = "" if bname == "sqlite" else label
                            res.add(c, bname, f"{interp} lock:with", "pairs_per_s",
                                    vals["lock:with"], "pairs/s", where)
                            res.add(c, bname, f"{interp} engine", "pairs_per_s", vals["C core"],
                                    "pairs/s", where)
                            res.add(c, bname, f"{interp} lock:with/engine", "ratio_median",
                                    vals["lock:with"] / vals["C core"], "ratio", where)
                            res.add(c, bname, f"{interp} lock:with/engine", "ratio_best_rounds",
                                    best["lock:with"] / best["C core"], "ratio", where)
                    cur, vals, best = m.group(2), {}, {}
                    res.meta[f"lua-{interp}"] = m.group(1).strip()
                    continue
                m = LUA_ROW.match(line)
                if m:
                    vals[m.group(1)] = float(m.group(2))
                    best[m.group(1)] = float(m.group(3))
    shutil.rmtree(tmp, ignore_errors=True)
    spread_servers()


# ---- 2. what users pick instead ------------------------------------------------

class Redis:
    """A redis-server of our own: 127.0.0.1, a free port, its own directory,
    no persistence; stopped by stop()."""

    def __init__(self, tmp):
        exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(exe):
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.dir = os.path.join(tmp, "redis")
        os.makedirs(self.dir, exist_ok=True)
        self.proc = subprocess.Popen(
            [exe, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no",
             "--logfile", os.path.join(self.dir, "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        import redis
        r = redis.Redis.from_url(self.url)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("redis-server did not answer")
        self.version = r.info()["redis_version"]
        r.close()

    def place(self, cpus):
        try:
            for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
                os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def alternatives_uncontended(res, tmp, redis_srv):
    """leaselock on SQLite vs redis-py Lock, python-redis-lock, filelock."""
    c = "alternatives-uncontended"
    import filelock
    pin_client()
    client = leaselock.connect(f"sqlite://{tmp}/alt.db")
    ll = client.lock("bench/alt")
    sides = {"leaselock sqlite": lambda: rate_with(ll, n)}
    fl = filelock.FileLock(os.path.join(tmp, "alt.filelock"))
    sides["filelock"] = lambda: rate_with(fl, n)
    conns = []
    if redis_srv:
        import redis
        import redis_lock
        r = redis.Redis.from_url(redis_srv.url)
        conns.append(r)
        rl = r.lock("bench/alt/redis-py", timeout=30)
        prl = redis_lock.Lock(r, "bench/alt/python-redis-lock", expire=30)
        sides["redis-py Lock"] = lambda: rate_with(rl, n)
        sides["python-redis-lock"] = lambda: rate_with(prl, n)
    n = 200
    for f in sides.values():
        f()
    n = q(200, 500)
    runs = [("other-cpu", {1} if NCPU > 1 else {0}), ("client-cpu", {0})] if redis_srv else [("", None)]
    for label, cpus in runs:
        if redis_srv:
            redis_srv.place(cpus)
        log(f"{c}: {label}")
        s = interleave(sides, q(5, 15))
        for side, v in s.items():
            res.add(c, "local", side, "pairs_per_s", statistics.median(v), "pairs/s", label)
        if redis_srv:
            add_ratio(res, c, "local", "leaselock sqlite/redis-py Lock", s["leaselock sqlite"],
                      s["redis-py Lock"], placement=label)
        add_ratio(res, c, "local", "leaselock sqlite/filelock", s["leaselock sqlite"],
                  s["filelock"], placement=label)
    if redis_srv:
        redis_srv.place(ALL_CPUS)
    for r in conns:
        r.close()
    client.close()


def run_contenders(kind, target, key, nproc, seconds, hold_ms):
    """NPROC worker processes of KIND on KEY for SECONDS, all started in the
    same window once every one is ready; their JSON results."""
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "workers.py"), "contend", kind,
                               target, key, str(seconds), str(hold_ms)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
             for _ in range(nproc)]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                p.wait(30)
                raise RuntimeError(f"{kind} worker failed: {p.stderr.read().strip()[-300:]}")
        start = time.time() + 0.2
        for p in procs:
            p.stdin.write(f"{start!r} {start + seconds!r}\n")
            p.stdin.flush()
        out = []
        for p in procs:
            o, e = p.communicate(timeout=seconds + 120)
            if p.returncode != 0 or not o.strip():
                raise RuntimeError(f"{kind} worker failed: {e.strip()[-300:]}")
            out.append(json.loads(o.strip().splitlines()[-1]))
        return out, seconds
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def pct(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def alternatives_fairness(res, tmp, redis_srv):
    """8 processes on one key, hold 1 ms: leaselock (SQLite, plain and fair),
    redis-py Lock, python-redis-lock, filelock."""
    c = "alternatives-fairness"
    unpin_client()
    nproc, seconds, hold = 8, q(1.0, 5.0), 1
    kinds = [("leaselock sqlite", "leaselock", f"sqlite://{tmp}/fair.db")]
    why = fair_unsupported(f"sqlite://{tmp}/fair.db")
    if why is None:
        kinds.append(("leaselock sqlite fair", "leaselock-fair", f"sqlite://{tmp}/fair.db"))
    else:
        res.note(c, f"leaselock's fair mode left out: {why}")
    if redis_srv:
        kinds += [("redis-py Lock", "redis-py", redis_srv.url),
                  ("python-redis-lock", "python-redis-lock", redis_srv.url)]
    kinds.append(("filelock", "filelock", os.path.join(tmp, "fair.filelock")))
    rounds = q(1, 3)
    per = {k[0]: {"fairness": [], "grants_per_s": [], "wait_p50": [], "wait_p99": [], "errors": 0}
           for k in kinds}
    for r in range(rounds):
        order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
        for label, kind, target in order:
            log(f"{c}: {label} round {r + 1}/{rounds}")
            try:
                out, secs = run_contenders(kind, target, f"bench/fair/{kind}/{r}", nproc, seconds,
                                           hold)
            except Exception as e:
                res.note(c, f"{label}: {e}")
                continue
            grants = [o["grants"] for o in out]
            log(f"{c}: {label}: grants per process {grants}")
            waits = [w for o in out for w in o["waits"]]
            d = per[label]
            d["errors"] += sum(o["errors"] for o in out)
            if not max(grants):
                res.note(c, f"{label}: no grant at all in round {r + 1}")
                continue
            d["fairness"].append(min(grants) / max(grants) if max(grants) else 0.0)
            d["grants_per_s"].append(sum(grants) / secs)
            d["wait_p50"].append(pct(waits, 50) * 1e3)
            d["wait_p99"].append(pct(waits, 99) * 1e3)
    for label, d in per.items():
        if not d["fairness"]:
            continue
        res.add(c, "local", label, "fairness", statistics.median(d["fairness"]), "fewest/most")
        res.add(c, "local", label, "grants_per_s", statistics.median(d["grants_per_s"]), "grants/s")
        res.add(c, "local", label, "wait_p50", statistics.median(d["wait_p50"]), "ms")
        res.add(c, "local", label, "wait_p99", statistics.median(d["wait_p99"]), "ms")
        if d["errors"]:
            res.note(c, f"{label}: {d['errors']} errors in the workers")
    res.meta["fairness-setup"] = (f"{nproc} processes, hold {hold} ms, {seconds:g} s per cell, "
                                  f"{rounds} round(s)")


def alternatives_cron(res, tmp):
    """flock(1) vs `leaselock run` for a `true` command, process start included."""
    c = "alternatives-cron"
    unpin_client()
    cli = os.path.join(BUILD, "leaselock")
    flock = shutil.which("flock")
    if not (os.path.exists(cli) and flock):
        res.note(c, "leaselock CLI or flock(1) missing, skipped")
        return
    uri = f"sqlite://{tmp}/cron.db"
    path = os.path.join(tmp, "cron.flock")
    n = q(20, 50)

    def runs(cmd):
        t = time.perf_counter()
        for _ in range(n):
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return n / (time.perf_counter() - t)

    sides = {"flock(1)": lambda: runs([flock, path, "true"]),
             "leaselock run": lambda: runs([cli, "--uri", uri, "run", "bench/cron", "--", "true"]),
             "leaselock --help": lambda: runs([cli, "--help"]),
             "true alone": lambda: runs(["true"])}
    s = interleave(sides, q(3, 9))
    for side, v in s.items():
        res.add(c, "local", side, "runs_per_s", statistics.median(v), "runs/s")
        res.add(c, "local", side, "ms_per_run", 1e3 / statistics.median(v), "ms")
    res.add(c, "local", "leaselock run/flock(1)", "ratio_median",
            paired_ratio(s["leaselock run"], s["flock(1)"]), "ratio")


def startup(res):
    """A process's start: `import leaselock` beside `import sqlite3` and the
    bare interpreter, `require "leaselock"` beside the bare Lua 5.4 and
    LuaJIT, each a new process run one after another, interleaved."""
    c = "startup"
    unpin_client()
    n = q(10, 30)
    env = dict(os.environ)

    def runs(cmd, e=env):
        t = time.perf_counter()
        for _ in range(n):
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=e)
        return 1e3 * (time.perf_counter() - t) / n

    py = sys.executable
    sides = {"python: import leaselock": lambda: runs([py, "-c", "import leaselock"]),
             "python: import sqlite3": lambda: runs([py, "-c", "import sqlite3"]),
             "python alone": lambda: runs([py, "-c", "pass"])}
    for interp, sub in (("lua5.4", "5.4"), ("luajit", "jit")):
        if shutil.which(interp) and os.path.exists(os.path.join(BUILD, "lua", sub, "leaselock.so")):
            e = dict(env, LUA_CPATH=f"{BUILD}/lua/{sub}/?.so")
            sides[f"{interp}: require"] = (
                lambda i=interp, e=e: runs([i, "-e", 'require "leaselock"'], e))
            sides[f"{interp} alone"] = lambda i=interp, e=e: runs([i, "-e", ""], e)
        else:
            res.note(c, f"{interp} or its built module missing, left out")
    s = interleave(sides, q(3, 9))
    for side, v in s.items():
        res.add(c, "local", side, "ms_per_run", statistics.median(v), "ms")
    pairs = [("import leaselock/import sqlite3", "python: import leaselock",
              "python: import sqlite3")]
    pairs += [(f"{i} require/alone", f"{i}: require", f"{i} alone")
              for i in ("lua5.4", "luajit") if f"{i}: require" in s]
    for name, a, b in pairs:
        res.add(c, "local", name, "ratio_median", paired_ratio(s[a], s[b]), "ratio")


# ---- 3. contention (make bench-contention) ---------------------------------------

def parse_table(text):
    """bench/contention.sh's table, by its header's column names: a list of
    dicts (extra columns kept, "fewest/most" split into fewest and most)."""
    rows, header = [], None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "backend":
            header = parts
            continue
        if header is None or len(parts) != len(header) or line.startswith("("):
            continue
        row = dict(zip(header, parts))
        if "fewest/most" in row:
            a, _, b = row["fewest/most"].partition("/")
            row["fewest"], row["most"] = a, b
        rows.append(row)
    return rows


def num(s):
    try:
        return float(str(s).rstrip("%x"))
    except ValueError:
        return None


def contention(res, tmp):
    c = "contention"
    unpin_client()
    spread_servers()
    secs = q(1, 5)
    log(f"{c}: make bench-contention ({secs} s per cell)")
    env = dict(os.environ, CONTENTION_SECONDS=str(secs))
    p = subprocess.run(["make", "--no-print-directory", "-C", ROOT, "bench-contention"],
                       capture_output=True, text=True, env=env)
    with open(os.path.join(OUT_DIR, "contention.txt"), "w") as f:
        f.write(p.stdout)
    rows = parse_table(p.stdout)
    if not rows:
        res.note(c, f"no table from make bench-contention (exit {p.returncode}): "
                    f"{(p.stdout + p.stderr).strip()[-300:]}")
        return
    for line in p.stdout.splitlines():
        if ": failed:" in line:
            res.note(c, line.strip()[:300])
    # "goals": contention.sh's marks on its 8-worker rows, not a variant.
    known = {"backend", "mode", "n", "fewest/most", "goals"}
    for row in rows:
        # Columns that are not numbers (a fair mode's "fair yes", say) tell
        # the variants apart, as the mode does; the count of workers last.
        extra = "".join(f" {k}={v}" for k, v in row.items()
                        if k not in known and k not in ("fewest", "most") and num(v) is None)
        variant = f"{row.get('mode', '')}{extra} n={row.get('n')}"
        for k, v in row.items():
            if k in known or num(v) is None:
                continue
            x = num(v)
            if x is not None:
                unit = "ms" if k.endswith(("_p50", "_p99", "_max")) else ""
                res.add(c, row["backend"], variant, k, x, unit)
    res.meta["contention-columns"] = " ".join(k for k in rows[0] if k not in ("fewest", "most"))
    res.meta["contention-seconds"] = secs


# ---- 4. scale -------------------------------------------------------------------

def with_option(uri, opt):
    return uri + ("&" if "?" in uri else "?") + opt


def fill(name, uri, table, n):
    """Puts N live records (held for a day by owners that never release)
    under keys scale/fill/* into the store URI names, with the backend's
    own client library, in bulk."""
    now_ms = int(time.time() * 1000)
    host = socket.gethostname()
    keys = [f"scale/fill/{i:06d}" for i in range(n)]
    if name == "sqlite":
        import sqlite3
        db = sqlite3.connect(uri[len("sqlite://"):])
        db.executemany(
            "INSERT OR IGNORE INTO leaselock_locks (key, owner, fence, acquired_at, expires_at, "
            "host, pid, label) VALUES (?, ?, 1, ?, ?, ?, 1, 'bench')",
            ((k, uuid.uuid4().hex, now_ms, now_ms + 86400000, host) for k in keys))
        db.commit()
        db.close()
    elif name == "mysql":
        from urllib.parse import unquote, urlsplit
        import pymysql
        u = urlsplit(uri)
        db = pymysql.connect(host=u.hostname, port=u.port or 3306, user=unquote(u.username or ""),
                             password=unquote(u.password or ""), database=u.path.lstrip("/"),
                             autocommit=True)
        cur = db.cursor()
        try:  # MariaDB's sequence engine: the rows made by the server, at once
            cur.execute(
                f"INSERT IGNORE INTO `{table}` (lock_key, owner, fence, expires_at, acquired_at, "
                "holder_host, holder_pid, holder_label) SELECT CONCAT('scale/fill/', "
                "LPAD(seq, 6, '0')), MD5(seq), 1, UTC_TIMESTAMP(6) + INTERVAL 1 DAY, "
                f"UTC_TIMESTAMP(6), %s, 1, 'bench' FROM seq_0_to_{n - 1}", (host.encode(),))
            n = 0
        except pymysql.MySQLError:
            pass  # MySQL: no sequence engine; batches from here
        for i in range(0, n, 5000):
            cur.executemany(
                f"INSERT IGNORE INTO `{table}` (lock_key, owner, fence, expires_at, acquired_at, "
                "holder_host, holder_pid, holder_label) VALUES (%s, %s, 1, "
                "UTC_TIMESTAMP(6) + INTERVAL 1 DAY, UTC_TIMESTAMP(6), %s, 1, 'bench')",
                [(k.encode(), uuid.uuid4().hex, host.encode()) for k in keys[i:i + 5000]])
        db.close()
    elif name == "postgresql":
        import psycopg
        with psycopg.connect(uri.split("?")[0], autocommit=True) as db:
            db.execute(
                f'INSERT INTO "{table}" (lock_key, owner, fence, expires_at, acquired_at, '
                "holder_host, holder_pid, holder_label) SELECT 'scale/fill/' || "
                "lpad(i::text, 6, '0'), md5(i::text), 1, clock_timestamp() + interval '1 day', "
                "clock_timestamp(), %s, 1, 'bench' FROM generate_series(0, %s - 1) i "
                "ON CONFLICT DO NOTHING", (host, n))
    elif name == "mongodb":
        from pymongo import MongoClient
        from pymongo.errors import BulkWriteError
        cl = MongoClient(uri.split("?")[0])
        coll = cl.get_default_database("leaselock")[table]
        now = datetime.datetime.now(datetime.timezone.utc)
        for i in range(0, n, 10000):
            docs = [{"_id": k, "owner": uuid.uuid4().hex, "fence": 1, "acquiredAt": now,
                     "renewedAt": now, "ttlMs": 86400000, "holdMs": 0,
                     "holder": {"host": host, "pid": 1, "label": "bench"}, "nextOwner": None,
                     "holds": 1}
                    for k in keys[i:i + 10000]]
            try:
                coll.insert_many(docs, ordered=False)
            except BulkWriteError:
                pass  # already there (a server named by the user, run twice)
        cl.close()


def mongo_index_probe(res, uri, table, label):
    """How the server finds one record among many: a query on _id alone, and
    the acquire's shape {_id, $expr} (what tells an index lookup from a
    scan of the collection)."""
    from pymongo import MongoClient
    cl = MongoClient(uri.split("?")[0], serverSelectionTimeoutMS=5000)
    coll = cl.get_default_database("leaselock")[table]
    for variant, query in [("find {_id}", {"_id": "scale/probe"}),
                           ("find {_id, $expr}", {"_id": "scale/probe",
                                                  "$expr": {"$eq": ["$owner", "nobody"]}})]:
        coll.find_one(query)
        n, t = 5, time.perf_counter()
        for _ in range(n):
            coll.find_one(query)
        res.add("scale", "mongodb", variant, "probe_ms", (time.perf_counter() - t) / n * 1e3,
                "ms", label)
    cl.close()


def scale(res, tmp, targets):
    c = "scale"
    pin_client()
    small, big = 100, 100_000
    label, cpus = placements()[-1]  # the client's CPU: the steadier of the two
    place_servers(cpus)
    for name, uri in targets:
        stores = {}
        try:
            for n in (small, big):
                table = f"bench_scale_{n}"
                if name == "sqlite":
                    u = f"sqlite://{tmp}/scale-{n}.db"
                elif name == "mongodb":
                    u = with_option(uri, f"leaselockCollection={table}")
                else:
                    u = with_option(uri, f"table={table}")
                cl = leaselock.connect(u)  # creates the schema
                lease = cl.lock("scale/probe", auto_renew=False).try_acquire()
                if lease:
                    lease.release()
                cl.close()
                t = time.perf_counter()
                fill(name, u, table, n)
                log(f"{c}: {name}: {n} live keys in {time.perf_counter() - t:.1f} s")
                stores[n] = u
        except Exception as e:
            res.note(c, f"{name}: could not fill the stores: {type(e).__name__}: {e}")
            continue
        # Rounds of about 0.3 s each (a store that slows down with its size
        # must not make the run last for ever).
        est = min(rate_core(stores[big], "scale/probe", 20), rate_core(stores[small], "scale/probe", 20))
        pairs = max(10, min(q(100, 500), int(est * q(0.15, 0.3))))
        log(f"{c}: {name}: {pairs} pairs per round")
        s = interleave({n: (lambda u=stores[n]: rate_core(u, "scale/probe", pairs))
                        for n in (small, big)}, q(5, 15))
        for n, v in s.items():
            res.add(c, name, f"{n} keys", "latency_us", 1e6 / statistics.median(v), "us", label)
        add_ratio(res, c, name, f"{big}/{small} keys", s[small], s[big], "latency ratio", label)
        if name == "mongodb":
            mongo_index_probe(res, stores[big], f"bench_scale_{big}", label)
    spread_servers()


# ---- 5. memory ------------------------------------------------------------------

def memory(res, tmp):
    c = "memory"
    unpin_client()
    cycles = q(20_000, 1_000_000)
    samples = 100
    env = dict(os.environ)
    cmds = {"python": [sys.executable, os.path.join(HERE, "workers.py"), "memory",
                       f"sqlite://{tmp}/mem-py.db", str(cycles), str(samples)]}
    if shutil.which("lua5.4") and os.path.exists(os.path.join(BUILD, "lua", "5.4", "leaselock.so")):
        cmds["lua5.4"] = ["lua5.4", os.path.join(HERE, "memory.lua"), f"sqlite://{tmp}/mem-lua.db",
                          str(cycles), str(samples)]
    else:
        res.note(c, "lua5.4 or the Lua module missing: Lua skipped")
    env_lua = dict(env, LUA_CPATH=f"{BUILD}/lua/5.4/?.so")
    log(f"{c}: {cycles} cycles each through {', '.join(cmds)} (side by side, embedded SQLite)")
    procs = {k: subprocess.Popen(v, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env_lua if k.startswith("lua") else env)
             for k, v in cmds.items()}
    t0 = time.time()
    for k, p in procs.items():
        o, e = p.communicate()
        if p.returncode != 0:
            res.note(c, f"{k}: failed: {e.strip()[-300:]}")
            continue
        pts = [tuple(int(x) for x in line.split()) for line in o.splitlines() if line.strip()]
        res.series[f"memory-{k}"] = pts
        warm = next((rss for n, rss in pts if n >= cycles // 100), pts[0][1])
        res.add(c, "sqlite", k, "rss_start", pts[0][1] / 1024, "MiB")
        res.add(c, "sqlite", k, "rss_after_1pct", warm / 1024, "MiB")
        res.add(c, "sqlite", k, "rss_end", pts[-1][1] / 1024, "MiB")
        res.add(c, "sqlite", k, "growth_after_warmup", (pts[-1][1] - warm) / 1024, "MiB")
        res.add(c, "sqlite", k, "cycles", cycles, "cycles")
    res.meta["memory-seconds"] = round(time.time() - t0)
    with open(os.path.join(OUT_DIR, "memory.csv"), "w") as f:
        f.write("binding,cycles,rss_kib\n")
        for k in procs:
            for n, rss in res.series.get(f"memory-{k}", []):
                f.write(f"{k},{n},{rss}\n")


# ---- 6. cost of safety ------------------------------------------------------------

def fair_unsupported(uri):
    """None when client.lock(key, fair=True) takes and releases a key on
    URI; else why not (not in this tree, or the backend keeps no queue)."""
    try:
        with leaselock.connect(uri) as cl:
            lock = cl.lock(f"bench/fair-check/{uuid.uuid4().hex[:8]}", fair=True)
            with lock.acquire(timeout=5):
                pass
        return None
    except TypeError as e:
        return f"fair mode is not in this tree ({e})"
    except leaselock.LockError as e:
        return f"{type(e).__name__}: {e}"


def safety(res, targets):
    c = "safety"
    pin_client()
    label, cpus = placements()[-1]
    place_servers(cpus)
    run_id = uuid.uuid4().hex[:8]
    for name, uri in targets:
        log(f"{c}: {name}")
        why = fair_unsupported(uri)
        fair = why is None
        if not fair:
            res.note(c, f"{name}: fair on/off skipped, fair mode refused here ({why}); "
                        "run make bench again once the backend has it")
        client = leaselock.connect(uri)
        locks = {"auto_renew on": client.lock(f"bench/{run_id}/renew"),
                 "auto_renew off": client.lock(f"bench/{run_id}/norenew", auto_renew=False)}
        if fair:
            locks["fair on"] = client.lock(f"bench/{run_id}/fair", fair=True)
        pairs = q(100, 500) if name == "sqlite" else q(50, 200)
        for lk in locks.values():
            rate_with(lk, 50)
        s = interleave({k: (lambda lk=lk: rate_with(lk, pairs)) for k, lk in locks.items()},
                       q(5, 15))
        for k, v in s.items():
            res.add(c, name, k, "pairs_per_s", statistics.median(v), "pairs/s", label)
        add_ratio(res, c, name, "auto_renew off/on", s["auto_renew off"], s["auto_renew on"],
                  placement=label)
        if fair:
            add_ratio(res, c, name, "fair on/off", s["fair on"], s["auto_renew on"],
                      placement=label)
        client.close()
    spread_servers()


# ---- the machine and versions ------------------------------------------------------

def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return ""


def machine_info(res, targets, redis_srv):
    m = res.meta
    m["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cpu = re.search(r"model name\s*:\s*(.*)", open("/proc/cpuinfo").read())
    m["cpu"] = cpu.group(1) if cpu else platform.processor()
    m["cpus"] = NCPU
    mem = re.search(r"MemTotal:\s*(\d+)", open("/proc/meminfo").read())
    m["memory"] = f"{int(mem.group(1)) / 1048576:.1f} GiB" if mem else "?"
    m["kernel"] = platform.release()
    m["virt"] = sh("systemd-detect-virt") or "?"
    m["os"] = sh("sh", "-c", ". /etc/os-release && echo $PRETTY_NAME")
    m["load_start"] = " ".join(open("/proc/loadavg").read().split()[:3])
    hdr = open(os.path.join(ROOT, "csrc", "leaselock.h")).read()
    v = re.search(r'#define LEASELOCK_VERSION "([^"]+)"', hdr)
    m["leaselock"] = (v.group(1) if v else "?") + " (" + (sh("git", "-C", ROOT, "rev-parse", "--short", "HEAD") or "?") + ")"
    m["python"] = platform.python_version()
    import sqlite3
    m["sqlite"] = sqlite3.sqlite_version
    m["lua5.4"] = sh("lua5.4", "-v")
    m["luajit"] = sh("luajit", "-v")
    m["flock"] = sh("flock", "--version")
    m["redis-server"] = (redis_srv.version if redis_srv else
                         "not started" if "alternatives" not in m.get("ran", []) else "not available")
    from importlib.metadata import version, PackageNotFoundError
    pk = []
    for p in ("redis", "python-redis-lock", "filelock", "PyMySQL", "psycopg", "pymongo", "matplotlib"):
        try:
            pk.append(f"{p} {version(p)}")
        except PackageNotFoundError:
            pk.append(f"{p} (missing)")
    m["packages"] = ", ".join(pk)
    for name, uri in targets:
        try:
            if name == "mysql":
                from peers.mysql import MySQLLeases
                p = MySQLLeases(uri)
                p.cur.execute("SELECT VERSION()")
                m["server-mysql"] = "MariaDB " + p.cur.fetchone()[0]
                p.close()
            elif name == "postgresql":
                import psycopg
                with psycopg.connect(uri) as db:
                    m["server-postgresql"] = "PostgreSQL " + db.execute("SHOW server_version").fetchone()[0]
            elif name == "mongodb":
                from pymongo import MongoClient
                cl = MongoClient(uri, serverSelectionTimeoutMS=5000)
                bi = cl.admin.command("buildInfo")
                pom = open(os.path.join(ROOT, "tests", "mongo-server", "pom.xml")).read()
                jv = re.search(r"<artifactId>mongo-java-server-memory-backend</artifactId>\s*<version>([^<]+)", pom)
                m["server-mongodb"] = (f"mongo-java-server {jv.group(1) if jv else '?'} "
                                       f"(reports MongoDB {bi.get('version')})")
                cl.close()
        except Exception as e:
            m[f"server-{name}"] = f"? ({type(e).__name__})"


# ---- the report being replaced ------------------------------------------------------

def read_previous(res):
    """The figures of the report this run replaces (docs/bench/results.csv and
    the date, version and mode of docs/benchmarks.md), read before either is
    overwritten: the goal "nothing else slower" compares against them."""
    path = os.path.join(OUT_DIR, "results.csv")
    rows = []
    try:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                try:
                    r["value"] = float(r["value"])
                except (TypeError, ValueError):
                    continue
                rows.append(r)
    except OSError:
        return
    res.previous = rows
    try:
        text = open(REPORT).read()
    except OSError:
        text = ""
    for key, pat in (("date", r"^\| date \| ([^|]+) \|"), ("leaselock", r"^\| leaselock \| ([^|]+) \|")):
        m = re.search(pat, text, re.M)
        if m:
            res.meta[f"previous-{key}"] = m.group(1).strip()
    res.meta["previous-quick"] = "**BENCH_QUICK=1 run**" in text


# ---- main ---------------------------------------------------------------------------

COMPARISONS = ["engine", "python", "lua", "alternatives", "startup", "contention", "scale", "memory", "safety"]


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    only = [x for x in os.environ.get("BENCH_ONLY", "").split(",") if x]
    todo = [x for x in COMPARISONS if not only or x in only]
    res = Results()
    res.meta["quick"] = QUICK
    res.meta["ran"] = todo
    tmp = tempfile.mkdtemp(prefix="leaselock-bench-")
    t_start = time.time()
    redis_srv = None
    targets = backends(tmp)
    res.meta["backends"] = [n for n, _ in targets]
    read_previous(res)
    log(f"make bench{' (BENCH_QUICK=1)' if QUICK else ''}: {', '.join(n for n, _ in targets)}; "
        f"comparisons: {', '.join(todo)}")
    try:
        if "alternatives" in todo:
            try:
                __import__("redis")  # redis-py first: Redis() needs it
                redis_srv = Redis(tmp)
            except Exception as e:
                res.note("alternatives-uncontended", f"no local Redis: {e}")
        machine_info(res, targets, redis_srv)
        steps = {
            "engine": lambda: overhead_engine(res, targets),
            "python": lambda: overhead_python(res, targets),
            "lua": lambda: overhead_lua(res, targets),
            "alternatives": lambda: (alternatives_uncontended(res, tmp, redis_srv),
                                     alternatives_fairness(res, tmp, redis_srv),
                                     alternatives_cron(res, tmp)),
            "startup": lambda: startup(res),
            "contention": lambda: contention(res, tmp),
            "scale": lambda: scale(res, tmp, targets),
            "memory": lambda: memory(res, tmp),
            "safety": lambda: safety(res, targets),
        }
        for name in todo:
            t = time.time()
            try:
                steps[name]()
            except Exception as e:
                traceback.print_exc()
                res.note(name, f"failed: {type(e).__name__}: {e}")
            res.meta[f"seconds-{name}"] = round(time.time() - t)
    finally:
        if redis_srv:
            redis_srv.stop()
        unpin_client()
        spread_servers()
        shutil.rmtree(tmp, ignore_errors=True)
    res.meta["seconds"] = round(time.time() - t_start)
    res.meta["load_end"] = " ".join(open("/proc/loadavg").read().split()[:3])
    res.write_csv(os.path.join(OUT_DIR, "results.csv"))
    import report
    report.write(res, OUT_DIR, REPORT)
    log(f"wrote {os.path.relpath(REPORT, ROOT)}, {os.path.relpath(OUT_DIR, ROOT)}/results.csv "
        f"and the plots in {res.meta['seconds']} s")


if __name__ == "__main__":
    main()
