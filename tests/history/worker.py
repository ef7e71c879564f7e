#!/usr/bin/env python3
"""worker.py - the Python worker of the history checker: the same grants as
worker.c, through the leaselock extension, on threads.

    worker.py URI RUNDIR KEYPREFIX WORKER_ID THREADS SECONDS NKEYS SEED

One history line per grant in RUNDIR/WORKER_ID.tN.hist (format in
tests/history/README.md), times from time.monotonic_ns() (CLOCK_MONOTONIC,
the clock of the C and Lua workers).
"""
import os
import random
import sys
import threading
import time

import leaselock

GUARD_NS = 2_000_000   # a write starts only with this much of the lease left
CHUNK_NS = 2_000_000   # sleeps in a hold: pieces this long, each followed by a read
TTLS = (0.020, 0.020, 0.020, 0.025, 0.030, 0.050, 0.100, 0.250)
RENEW_TTLS = (0.020, 0.020, 0.030, 0.050, 0.100)

now_ns = time.monotonic_ns


class Hold:
    """One grant as the worker sees it: the local deadline, conservatively
    late (the clock read after the remaining time, plus the remaining), and
    tight, the least such bound since the deadline last moved (worker.c)."""

    def __init__(self, lease):
        self.lease = lease
        self.deadline = self.tight = now_ns()
        self.lost = False
        self.lost_at = None
        self.jumps = 0  # moves later not made by the worker's own renews
        self.read(True)

    def read(self, reset=False):
        t0 = now_ns()
        r = round(self.lease.expires_in * 1000)  # the core's whole milliseconds
        t = now_ns()
        if r <= 0:
            # The engine can declare it lost before the deadline (a renewal
            # answered NOT_HELD): the worker stops when it sees that.
            if not self.lost:
                self.lost_at = t
            self.lost = True
            return
        self.deadline = t + r * 1_000_000
        jump = self.deadline - self.tight > 1_000_000 + t - t0
        if jump and not reset:
            self.jumps += 1
        if reset or jump or self.deadline < self.tight:
            self.tight = self.deadline

    def sleep(self, ns):
        until = now_ns() + ns
        while not self.lost:
            left = until - now_ns()
            if left <= 0:
                break
            time.sleep(min(left, CHUNK_NS) / 1e9)
            self.read()


def increment(h, fd, rnd):
    """Read, pause, write +1, only while the lease is ours by the local
    view. Returns the time the write returned, 0 when skipped."""
    h.read()
    if h.lost or h.deadline - now_ns() < GUARD_NS:
        return 0
    text = os.pread(fd, 32, 0).strip()
    v = int(text) if text else 0
    time.sleep(rnd.randrange(300) / 1e6)
    h.read()
    if h.lost or h.deadline - now_ns() < GUARD_NS:
        return 0
    os.pwrite(fd, b"%020d\n" % (v + 1), 0)
    return now_ns()


class Worker:
    def __init__(self, wid, tid, client, fds, out, rnd, args):
        self.name, self.client, self.fds, self.out, self.rnd = f"{wid}.t{tid}", client, fds, out, rnd
        self.prefix, self.nkeys = args.prefix, args.nkeys
        self.grants = self.incs = self.errors = 0

    def one_grant(self):
        rnd = self.rnd
        k = rnd.randrange(self.nkeys)
        key = f"{self.prefix}/{k}"
        ttl = rnd.choice(TTLS)
        auto_renew = rnd.random() < 0.5
        min_hold = (1 + rnd.randrange(30)) / 1000 if rnd.random() < 0.25 else 0.0
        one_try = rnd.random() < 1 / 3
        lock = self.client.lock(key, ttl=ttl, min_hold=min_hold, auto_renew=auto_renew)
        try:
            lease = lock.try_acquire() if one_try else lock.acquire(timeout=2)
        except leaselock.LockTimeout:
            return
        except leaselock.LockError as e:
            print(f"worker {self.name}: acquire: {e!r}", file=sys.stderr)
            self.errors += 1
            return
        if lease is None:
            time.sleep(rnd.randrange(1000) / 1e6)
            return
        t_acq = now_ns()
        h = Hold(lease)
        if h.lost:
            h.lost_at = t_acq  # it ran out before acquire returned: never held
        steps = rnd.randrange(4)
        inc_step = rnd.randrange(steps + 1)
        renews, t_write, t_call, end = 0, 0, None, None
        for s in range(steps + 1):
            if h.lost or end:
                break
            if s == inc_step:
                t_write = increment(h, self.fds[k], rnd)
            if s == steps:
                break
            h.sleep(rnd.randrange(int(ttl * 1e6 / 3)) * 1000)
            if h.lost or rnd.random() < 0.5:
                continue
            t = now_ns()
            try:
                lease.renew(rnd.choice(RENEW_TTLS))
                renews += 1
                h.read(True)
            except (leaselock.NotHeld, leaselock.LockLost) as e:
                t_call, end = t, ("lost" if isinstance(e, leaselock.LockLost) else "not-held")
            except leaselock.LockError:
                self.errors += 1
                h.read()
        if not end and not h.lost and not auto_renew and rnd.random() < 0.25:
            while not h.lost:  # overstay until the local deadline passes
                h.sleep(CHUNK_NS)
        if not end and h.lost:
            end = "lost"
        if not end:
            h.read()
            t_call = now_ns()
            try:
                lease.release()
                end = "released"
            except leaselock.LockLost:
                end = "lost"
            except leaselock.NotHeld:
                end = "not-held"
            except leaselock.LockError:
                end = "error"
                self.errors += 1
        # t_end: the least bound unless auto-renewal could have moved it (worker.c)
        bound = h.deadline if auto_renew else h.tight
        if h.lost_at is not None and (t_call is None or h.lost_at < t_call):
            t_call = h.lost_at
        t_end = bound if t_call is None else min(t_call, bound)
        t_late = h.deadline if t_call is None else min(t_call, h.deadline)
        self.out.write(f"{key} {lease.fence} {t_acq} {t_end} {t_late} {end} {self.name} python "
                       f"{1 if t_write else 0} {t_write} {round(ttl * 1000)} "
                       f"ar={int(auto_renew)},mh={round(min_hold * 1000)},rn={renews},"
                       f"ot={int(one_try)},jp={h.jumps}\n")
        self.grants += 1
        self.incs += 1 if t_write else 0

    def run(self, end_ns):
        while now_ns() < end_ns:
            self.one_grant()
        self.out.write(f"# done grants={self.grants} incs={self.incs} errors={self.errors}\n")
        self.out.close()


class Args:
    def __init__(self, argv):
        if len(argv) != 9:
            sys.exit(f"usage: {argv[0]} URI RUNDIR KEYPREFIX WORKER_ID THREADS SECONDS NKEYS SEED")
        self.uri, self.rundir, self.prefix, self.wid = argv[1:5]
        self.threads, self.seconds = int(argv[5]), float(argv[6])
        self.nkeys, self.seed = int(argv[7]), int(argv[8])


def main():
    args = Args(sys.argv)
    fds = [os.open(os.path.join(args.rundir, f"counter.{k}"), os.O_RDWR | os.O_CREAT, 0o644)
           for k in range(args.nkeys)]
    shared = leaselock.connect(args.uri, label="history")
    end_ns = now_ns() + int(args.seconds * 1e9)
    threads = []
    for i in range(args.threads):
        client = shared if i % 2 == 0 else leaselock.connect(args.uri, label="history")
        out = open(os.path.join(args.rundir, f"{args.wid}.t{i}.hist"), "w", encoding="utf-8")
        out.write(f"# worker={args.wid}.t{i} binding=python backend={client.backend} "
                  f"pid={os.getpid()}\n")
        rnd = random.Random(f"{args.seed}/{args.wid}/{i}")
        w = Worker(args.wid, i, client, fds, out, rnd, args)
        threads.append(threading.Thread(target=w.run, args=(end_ns,), name=w.name))
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
