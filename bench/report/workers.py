"""Child processes of bench/report/run.py.

  workers.py contend KIND TARGET KEY SECONDS HOLD_MS
      One of N processes on one key. Prints "ready" once its lock is made,
      then reads "START END" (time.time()) from stdin and, in that window:
      blocking acquire, hold HOLD_MS, release. Prints one JSON line: grants,
      waits (seconds from asking to getting, each grant), errors.
      KIND: leaselock (TARGET a URI), leaselock-fair, redis-py,
      python-redis-lock (TARGET a redis:// URL), filelock (TARGET a path).
  workers.py memory URI CYCLES SAMPLES
      CYCLES `with lock:` pairs on one key, printing "cycles rss_kb" SAMPLES
      times along the way (and once before the first).
"""
import json
import os
import sys
import time


def rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def make_lock(kind, target, key):
    """A context manager that waits for the key as the library does by default."""
    if kind in ("leaselock", "leaselock-fair"):
        import leaselock
        client = leaselock.connect(target)
        if kind == "leaselock-fair":
            return client.lock(key, ttl=30, fair=True)
        return client.lock(key, ttl=30)
    if kind == "redis-py":
        import redis
        r = redis.Redis.from_url(target)
        return r.lock(key, timeout=30)
    if kind == "python-redis-lock":
        import redis
        import redis_lock
        r = redis.Redis.from_url(target)
        return redis_lock.Lock(r, key, expire=30)
    if kind == "filelock":
        import filelock
        return filelock.FileLock(target)
    raise SystemExit(f"unknown kind {kind}")


def contend(kind, target, key, seconds, hold_ms):
    lock = make_lock(kind, target, key)
    # Ready (imports done, lock made): the driver then sends every worker
    # the same window, once all are ready.
    print("ready", flush=True)
    start, end = (float(x) for x in sys.stdin.readline().split())
    hold = hold_ms / 1000.0
    waits, errors = [], 0
    while time.time() < start:
        time.sleep(0.0005)
    while True:
        t0 = time.time()
        if t0 >= end:
            break
        try:
            with lock:
                t1 = time.time()
                time.sleep(hold)
        except Exception as e:  # a benchmark: count it, go on
            errors += 1
            print(f"{kind}: {type(e).__name__}: {e}", file=sys.stderr)
            time.sleep(0.01)
            continue
        if t1 < end:
            waits.append(t1 - t0)
    print(json.dumps({"grants": len(waits), "waits": waits, "errors": errors}))


def memory(uri, cycles, samples):
    import leaselock
    client = leaselock.connect(uri)
    lock = client.lock("bench/memory/python")
    step = max(1, cycles // samples)
    print(0, rss_kb(), flush=True)
    done = 0
    while done < cycles:
        for _ in range(min(step, cycles - done)):
            with lock:
                pass
        done += min(step, cycles - done)
        print(done, rss_kb(), flush=True)
    client.close()


def main():
    cmd = sys.argv[1]
    if cmd == "contend":
        kind, target, key, seconds, hold = sys.argv[2:7]
        contend(kind, target, key, float(seconds), float(hold))
    elif cmd == "memory":
        memory(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
