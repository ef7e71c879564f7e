"""leaselock from Python: processes taking turns on one key.

Three worker processes share one lock on the embedded default database
($LEASELOCK_URI, else SQLite under ~/.local/state/leaselock). Each takes the
lock three times; the fence printed grows with every turn, whoever holds it.
Then a scheduled-job decorator: whoever finds the job already running skips.

    make demo-python      (or: PYTHONPATH=... python3 examples/python_demo.py)
"""
import multiprocessing
import multiprocessing.context
import multiprocessing.queues
import os
import sys
import time
from typing import Any, Callable

import leaselock

KEY = "demo/python/turns"


def worker(n: int) -> None:
    with leaselock.connect(label=f"demo worker {n}") as client:
        lock = client.lock(KEY, ttl=10)
        for turn in range(3):
            with lock as lease:
                print(f"  worker {n} (pid {os.getpid()}) holds {KEY!r}  fence {lease.fence}",
                      flush=True)
                time.sleep(0.1)  # the work; nobody else is in here
            time.sleep(0.3)  # time for the others to get their turn


def nightly(n: int, out: "multiprocessing.queues.Queue[str]") -> None:
    with leaselock.connect() as client:
        @client.locked("demo/python/nightly", ttl=10)
        def job() -> str:
            time.sleep(0.3)
            return f"worker {n} ran the job"

        out.put(job() or f"worker {n} skipped: already running elsewhere")


def run(ctx: multiprocessing.context.SpawnContext, target: Callable[..., None],
        args_list: list[tuple[Any, ...]]) -> None:
    """Starts one process per args, waits for them all, and ends the demo
    with an error when any of them failed."""
    procs = [ctx.Process(target=target, args=args) for args in args_list]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    failed = [f"{p.name} (pid {p.pid}) exited with {p.exitcode}" for p in procs if p.exitcode]
    if failed:
        print(f"{target.__name__} workers failed: " + "; ".join(failed), file=sys.stderr)
        raise SystemExit(1)


def main() -> None:
    with leaselock.connect() as client:
        print(f"database: {client.uri}")
    ctx = multiprocessing.get_context("spawn")
    run(ctx, worker, [(n,) for n in range(3)])

    print("a scheduled job started by three processes at once:")
    q: "multiprocessing.queues.Queue[str]" = ctx.Queue()
    run(ctx, nightly, [(n, q) for n in range(3)])
    for _ in range(3):
        print("  " + q.get(timeout=10))

    with leaselock.connect() as client:
        rec = client.info(KEY)
        assert rec is not None  # the workers made it
        print(f"record now: fence {rec['fence']}, owner {rec['owner']}, "
              f"last holder {rec['holder'].label!r} pid {rec['holder'].pid}")


if __name__ == "__main__":
    main()
