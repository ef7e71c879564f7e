"""make bench-python: acquire+release pairs per second through the Python
binding's `with lock:` beside

  - the same loop inside the C core (core_loop.c: a C loop of
    leaselock_acquire/release, no Python per pair, in a small library of its
    own that make bench-python builds and this script loads with ctypes,
    --core-lib), on embedded SQLite and on MongoDB when MONGODB_URI is set
    (goal: >= 0.95 of it);
  - a pure-Python pymongo implementation of the same protocol
    (pymongo_lease.py) against the same MongoDB server (goal: >= 2x).

Rounds are interleaved (A, B, C, A, B, C, ...) and the median of each is
reported, so a noisy neighbour hurts all of them alike.

The MongoDB figures come twice when the test server's pid is known
(LEASELOCK_MONGO_SERVER_PID, set by make bench-python): first with the
server's threads on the CPUs the client does not use, then with them on the
client's CPU. On a virtual machine a cross-CPU wakeup can cost about 100 us
per round trip (the second figure set leaves it out), which hides what each
client itself costs; the first set keeps it, as a two-host setup would. This is a
benchmark, not a test: it reports, it does not fail on speed.
"""
import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import time
import uuid

import leaselock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def rate_with_lock(client, key, n):
    lock = client.lock(key)
    t = time.perf_counter()
    for _ in range(n):
        with lock:
            pass
    return n / (time.perf_counter() - t)


_core_loop = None


def load_core_loop(path):
    """llbench_core_loop from core_loop.c (ctypes releases the GIL around it)."""
    global _core_loop
    lib = ctypes.CDLL(path)
    fn = lib.llbench_core_loop
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_longlong,
                   ctypes.c_char_p, ctypes.c_size_t]
    _core_loop = fn


def rate_core(uri, key, n):
    k = key.encode()
    err = ctypes.create_string_buffer(512)
    seconds = _core_loop(uri.encode(), k, len(k), n, err, len(err))
    if seconds < 0:
        raise RuntimeError(f"core loop: {err.value.decode(errors='replace')}")
    return n / seconds


def rate_pymongo(impl, key, n):
    t = time.perf_counter()
    for _ in range(n):
        owner, _fence = impl.acquire(key)
        if not impl.release(key, owner):
            raise RuntimeError("pymongo release found the lease gone")
    return n / (time.perf_counter() - t)


def run(name, uri, pairs, rounds, pymongo_impl=None):
    run_id = uuid.uuid4().hex[:8]
    client = leaselock.connect(uri)
    series = {"with lock:": [], "C core": []}
    if pymongo_impl:
        series["pymongo"] = []
    # Warm up each path (connections, statements, first record) and, on
    # MongoDB, the test server's JVM, whose JIT needs a few thousand
    # commands before its speed settles.
    warm = 3000 if pymongo_impl else 50
    rate_with_lock(client, f"bench/{run_id}/py", warm)
    rate_core(uri, f"bench/{run_id}/core", warm)
    if pymongo_impl:
        rate_pymongo(pymongo_impl, f"bench/{run_id}/pymongo", warm)
    for _ in range(rounds):
        series["with lock:"].append(rate_with_lock(client, f"bench/{run_id}/py", pairs))
        series["C core"].append(rate_core(uri, f"bench/{run_id}/core", pairs))
        if pymongo_impl:
            series["pymongo"].append(rate_pymongo(pymongo_impl, f"bench/{run_id}/pymongo", pairs))
    client.close()
    med = {k: statistics.median(v) for k, v in series.items()}
    best = {k: max(v) for k, v in series.items()}
    print(f"--- {name}: {pairs} pairs x {rounds} rounds (pairs/s: median, best round; min)")
    for k, v in series.items():
        print(f"  {k:<11} {med[k]:>10.0f} {best[k]:>10.0f}   ({min(v):.0f})")

    def ratio(a, b):
        return f"median {med[a] / med[b]:.3f}, best {best[a] / best[b]:.3f}"

    print(f"  with lock: / C core  = {ratio('with lock:', 'C core')}   (goal >= 0.95)")
    if pymongo_impl:
        print(f"  with lock: / pymongo = {ratio('with lock:', 'pymongo')}   (goal >= 2x)")
    return med


def server_threads(pid):
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def place_server(pid, cpus):
    """Moves every thread of process PID to CPUS; False when it cannot."""
    tids = server_threads(pid)
    try:
        for tid in tids:
            os.sched_setaffinity(tid, cpus)
    except OSError:
        return False
    return bool(tids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=500, help="pairs per MongoDB round")
    ap.add_argument("--rounds", type=int, default=15, help="MongoDB rounds")
    ap.add_argument("--sqlite-pairs", type=int, default=500, help="pairs per SQLite round")
    ap.add_argument("--sqlite-rounds", type=int, default=61,
                    help="SQLite rounds (short ones, many: a WAL checkpoint lands in a few)")
    ap.add_argument("--core-lib", required=True,
                    help="the library built from bench/python/core_loop.c")
    args = ap.parse_args()
    load_core_loop(args.core_lib)
    with tempfile.TemporaryDirectory(prefix="leaselock-bench-") as d:
        run("sqlite (embedded, WAL)", f"sqlite://{d}/bench.db", args.sqlite_pairs,
            args.sqlite_rounds)
    mongo = os.environ.get("MONGODB_URI")
    if not mongo:
        print("--- mongodb: MONGODB_URI not set, skipped (make bench-python starts a server)")
        return
    from pymongo_lease import PyMongoLeases

    mine = os.sched_getaffinity(0)
    others = set(range(os.cpu_count() or 1)) - mine
    pid = os.environ.get("LEASELOCK_MONGO_SERVER_PID")
    placements = [("mongodb (mongo-java-server)", None)]
    if pid and others and server_threads(pid):
        placements = [
            ("mongodb (mongo-java-server on other CPUs)", others),
            ("mongodb (mongo-java-server on the client's CPU)", mine),
        ]
    impl = PyMongoLeases(mongo)
    try:
        for name, cpus in placements:
            if cpus is not None and not place_server(pid, cpus):
                print(f"--- {name}: cannot set the server's CPUs, skipped")
                continue
            run(name, mongo, args.pairs, args.rounds, impl)
    finally:
        impl.close()


if __name__ == "__main__":
    main()
