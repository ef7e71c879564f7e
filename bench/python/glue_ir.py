"""Instructions per acquire+release pair of `with lock:` and of the C core's
loop (core_loop.c), counted by valgrind's callgrind: what the binding adds
to the core's calls (the glue), on a machine too busy for wall time to say.

Each side runs twice in a child process under callgrind, with N1 and N2
pairs (after 50 that warm up); the difference divided by N2 - N1 leaves
the start-up out. Per pair it prints the whole count, the part inside the
core's calls (leaselock_acquire, leaselock_lease_release and
leaselock_lease_destroy, inclusive) and the rest; the glue is the rest of
`with lock:` less the rest of the core loop (its loop, ctypes, and what
runs outside those calls in both, such as a WAL checkpoint).

  PYTHONPATH=build/python/lib python3 bench/python/glue_ir.py \\
      --core-lib build/bench/python/libllbench.so [--uri URI] [--imports]

--uri: default a new SQLite file; a server's URI (tests/with-servers.sh
sets MONGODB_URI, ...). --imports: logging and asyncio imported first, as
a program that uses them has (pymongo does: bench.py's MongoDB rounds).
Needs valgrind and callgrind_annotate. A benchmark: it reports, never fails
on a figure.
"""
import argparse
import ctypes
import os
import re
import subprocess
import sys
import tempfile
import uuid

CORE_CALLS = ("leaselock_acquire", "leaselock_lease_release", "leaselock_lease_destroy")


def child(side, uri, key, n, core_lib, imports):
    """Runs under callgrind: 50 pairs to warm up, then n."""
    if imports:
        import asyncio  # noqa: F401
        import logging  # noqa: F401
    if side == "py":
        import leaselock

        client = leaselock.connect(uri)
        lock = client.lock(key)
        for _ in range(50 + n):
            with lock:
                pass
        client.close()
        return
    fn = ctypes.CDLL(core_lib).llbench_core_loop
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_longlong,
                   ctypes.c_char_p, ctypes.c_size_t]
    err = ctypes.create_string_buffer(512)
    k = key.encode()
    for count in (50, n):  # the loop warms its own new client with 20 more
        if fn(uri.encode(), k, len(k), count, err, len(err)) < 0:
            sys.exit(f"core loop: {err.value.decode(errors='replace')}")


def count(side, uri, key, n, args):
    """(all instructions, those inside the core's calls) of one child."""
    with tempfile.TemporaryDirectory(prefix="leaselock-glue-") as d:
        out = os.path.join(d, "callgrind.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
               os.path.abspath(__file__), "--child", side, "--uri", uri, "--key", key,
               "--n", str(n), "--core-lib", args.core_lib]
        if args.imports:
            cmd.append("--imports")
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{side} under callgrind failed:\n{r.stderr[-2000:]}")
        with open(out, errors="replace") as f:
            total = next(int(line.split()[1]) for line in f if line.startswith("totals:"))
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                             capture_output=True, text=True, check=True).stdout
    core = 0
    for line in ann.splitlines():
        m = re.match(r"\s*([\d,]+) .*\s\S*:(\w+) \[", line)
        if m and m.group(2) in CORE_CALLS:
            core += int(m.group(1).replace(",", ""))
    return total, core


def per_pair(side, uri, args):
    key = f"bench/glue/{uuid.uuid4().hex[:8]}/{side}"
    t1, c1 = count(side, uri, key, args.n1, args)
    t2, c2 = count(side, uri, key, args.n2, args)
    n = args.n2 - args.n1
    total, core = (t2 - t1) / n, (c2 - c1) / n
    print(f"  {side:<5} per pair: {total:>9.0f} all, {core:>9.0f} in the core's calls, "
          f"{total - core:>7.0f} rest", flush=True)
    return total, core


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--core-lib", required=True,
                    help="the library built from bench/python/core_loop.c")
    ap.add_argument("--uri", help="default: a new SQLite file")
    ap.add_argument("--imports", action="store_true",
                    help="import logging and asyncio first")
    ap.add_argument("--n1", type=int, default=1000, help="pairs of the first run")
    ap.add_argument("--n2", type=int, default=4000, help="pairs of the second run")
    ap.add_argument("--child", choices=("py", "core"), help=argparse.SUPPRESS)
    ap.add_argument("--key", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.uri, args.key, args.n, args.core_lib, args.imports)
        return
    with tempfile.TemporaryDirectory(prefix="leaselock-glue-") as d:
        uri = args.uri or f"sqlite://{d}/bench.db"
        shown = re.sub(r"//[^@/]*@", "//", uri)  # no password
        imported = " (logging, asyncio imported)" if args.imports else ""
        print(f"--- {shown}{imported}: callgrind, {args.n1} and {args.n2} pairs")
        py_total, py_core = per_pair("py", uri, args)
        core_total, core_core = per_pair("core", uri, args)
    glue = (py_total - py_core) - (core_total - core_core)
    print(f"  glue (rest of with lock: less the core loop's): {glue:.0f} per pair; "
          f"with lock: / C core by instructions: {core_total / py_total:.3f}")


if __name__ == "__main__":
    main()
