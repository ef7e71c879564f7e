"""leaselock from Python: processes taking turns on one key.

Three worker processes share one lock on the embedded default database
($LEASELOCK_URI, else SQLite under ~/.local/state/leaselock). Each takes the
lock three times; the fence printed grows with every turn, whoever holds it.
Then a scheduled-job decorator: whoever finds the job already running skips.

    make demo-python      (or: PYTHONPATH=... python3 examples/python_demo.py)
"""
import multiprocessing
import os
import time

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


def nightly(n: int, out) -> None:
    with leaselock.connect() as client:
        @client.locked("demo/python/nightly", ttl=10)
        def job():
            time.sleep(0.3)
            return f"worker {n} ran the job"

        out.put(job() or f"worker {n} skipped: already running elsewhere")


def main() -> None:
    with leaselock.connect() as client:
        print(f"database: {client.uri}")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(n,)) for n in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()

    print("a scheduled job started by three processes at once:")
    q = ctx.Queue()
    procs = [ctx.Process(target=nightly, args=(n, q)) for n in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    for _ in procs:
        print("  " + q.get())

    with leaselock.connect() as client:
        rec = client.info(KEY)
        print(f"record now: fence {rec['fence']}, owner {rec['owner']}, "
              f"last holder {rec['holder'].label!r} pid {rec['holder'].pid}")
    if any(p.exitcode for p in procs):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
