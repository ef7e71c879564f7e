"""Drives the non-blocking wait test against an nginx with one worker.

One request holds KEY for HOLD seconds; WAITERS requests wait for it
through lock:acquire_nb; one more waits with a short timeout. While they
wait, PINGS requests to /ping (same worker) are sent one after another.
Checks: every ping is answered within PING_MAX s and before the holder
releases (so while the waiters are still waiting); the waiters get the
lock one after another after the release (no overlap, fences
increasing); the short waiter gets nil, msg, "TIMEOUT".
usage: nb_driver.py PORT URI KEY
"""
import sys
import threading
import time
import urllib.parse
import urllib.request

HOLD, WAITERS, PINGS, PING_MAX, SHORT = 1.0, 4, 50, 0.1, 0.3

port, uri, key = sys.argv[1], sys.argv[2], sys.argv[3]
base = f"http://127.0.0.1:{port}"


def get(path):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return r.status, r.read().decode()


def take(timeout, hold):
    q = urllib.parse.urlencode({"uri": uri, "key": key, "timeout": timeout, "hold": hold})
    return get("/take?" + q)


results = {}


def run(name, timeout, hold):
    try:
        results[name] = take(timeout, hold)
    except Exception as e:  # reported below
        results[name] = (0, repr(e))


problems = []
holder = threading.Thread(target=run, args=("holder", 5, HOLD))
holder.start()
time.sleep(0.1)
threads = [threading.Thread(target=run, args=(f"w{i}", 10, 0.05)) for i in range(WAITERS)]
threads.append(threading.Thread(target=run, args=("short", SHORT, 0)))
for t in threads:
    t.start()
time.sleep(0.05)

pings = []
pings_from = time.time()
for _ in range(PINGS):
    t0 = time.time()
    status, body = get("/ping")
    t1 = time.time()
    if status != 200 or body != "pong\n":
        problems.append(f"/ping answered {status} {body!r}")
    pings.append((t0, t1))
pings_to = time.time()

holder.join()
for t in threads:
    t.join()

parsed = {}
for name, (status, body) in results.items():
    f = body.split()
    if status != 200 or not f:
        problems.append(f"{name}: {status} {body!r}")
        continue
    parsed[name] = f
h = parsed.get("holder")
if not h or h[0] != "ok":
    problems.append(f"holder did not get the lock: {results.get('holder')}")
else:
    h_acq, h_rel = float(h[3]), float(h[4])
    worst = max(t1 - t0 for t0, t1 in pings)
    if worst > PING_MAX:
        problems.append(f"slowest /ping took {worst * 1000:.1f} ms (> {PING_MAX * 1000:.0f} ms)")
    if pings_to >= h_rel:
        problems.append(f"pings ended {pings_to - h_rel:.3f} s after the holder released")
    got = []
    for i in range(WAITERS):
        w = parsed.get(f"w{i}")
        if not w or w[0] != "ok":
            problems.append(f"waiter w{i}: {results.get(f'w{i}')}")
            continue
        fence, started, acquired, released = int(w[1]), float(w[2]), float(w[3]), float(w[4])
        if started >= pings_from:
            problems.append(f"waiter w{i} started waiting after the pings began")
        got.append((acquired, released, fence))
    got.sort()
    prev_rel, prev_fence = h_rel, int(h[1])
    for acquired, released, fence in got:
        if acquired < prev_rel:
            problems.append(f"a waiter acquired at {acquired} before the previous holder released ({prev_rel}): overlap")
        if fence <= prev_fence:
            problems.append(f"fence {fence} after {prev_fence}: not increasing")
        prev_rel, prev_fence = released, fence
    s = parsed.get("short")
    if not s or s[:2] != ["fail", "TIMEOUT"]:
        problems.append(f"short waiter: expected fail TIMEOUT, got {results.get('short')}")
    else:
        waited = float(s[3]) - float(s[2])
        if not SHORT - 0.05 <= waited < HOLD:
            problems.append(f"short waiter timed out after {waited:.3f} s (timeout {SHORT} s)")

if problems:
    print("FAIL: nb:", "; ".join(problems))
    sys.exit(1)
print(f"ok: nb: holder held {h_rel - h_acq:.2f} s; {PINGS} /ping on the same worker during the wait, "
      f"slowest {worst * 1000:.1f} ms, all done {h_rel - pings_to:.2f} s before the release; "
      f"{len(got)} waiters then took turns (fences {', '.join(str(g[2]) for g in got)}); "
      f"a {SHORT} s waiter got TIMEOUT after {waited:.3f} s")
