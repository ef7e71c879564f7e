"""Drives the non-blocking wait test against an nginx with one worker.

usage: nb_driver.py PORT NAME URI KEY

The wait: one request holds KEY for HOLD seconds; WAITERS requests wait
for it with lock:acquire_nb (half in the thread pool "default", half in
"llnb" on the server backends), one more with a SHORT timeout. While they
wait, PINGERS clients send /ping (same worker) one request after another.
Checks: the pings answered between the last waiter's start and the
holder's release are counted and must be at least MIN_PINGS, none slower
than PING_MAX (a generous sanity bound); the waiters made busy tries
during the wait (the client's stats); they get the lock one after
another after the release (no overlap, fences increasing); the short
waiter gets nil, msg, "TIMEOUT".

On SQLite, then: this process holds the file with BEGIN EXCLUSIVE while
a request waits with acquire_nb (timeout LOCKED_WAIT): its tries, made on
the worker, each wait a moment at most for the file's lock, so /ping is
answered meanwhile (none slower than LOCKED_PING_MAX) and the request
gets "TIMEOUT" after about LOCKED_WAIT.

On a server backend (NAME is not sqlite) the database is reached through
a proxy here that holds each reply back DELAY seconds, so that a try made
on the event loop would stall it for at least that long: with 40 waiters
trying, the pings would starve. Then also:
- bad arguments raise under nginx with the expected messages;
- a request that ends while its try runs in a pool thread leaves a parked
  lease that nobody adopts: the key is held, still held when the lease
  is nearly PARKED_AGE old (lua/lleaselock.h's PARKED_MAX_MS), then released
  by acquire_nb's reaping timer in a pool thread with no other request
  to the worker, well before its 30 s TTL (on PostgreSQL only: the timer
  and its pool are the binding's, the same on every backend, and the
  check mostly waits); a second one is released by client:close().
Prints one "ok: ..." line with the figures, or "FAIL: ..." and exits 1.
"""
import asyncio
import sqlite3
import sys
import threading
import time
import urllib.parse
import urllib.request

HOLD, WAITERS, PINGERS, SHORT = 3.0, 40, 2, 0.3
MIN_PINGS, PING_MAX, DELAY = 50, 1.0, 0.025
PARKED_AGE = 5.0
LOCKED_WAIT, LOCKED_PING_MAX = 1.0, 0.1

port, name, uri, key = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
base = f"http://127.0.0.1:{port}"
server = name != "sqlite"
problems = []


def get(path, **args):
    q = urllib.parse.urlencode(args)
    with urllib.request.urlopen(f"{base}{path}?{q}", timeout=60) as r:
        return r.status, r.read().decode()


# ---- the delaying proxy (server backends) -----------------------------

def start_proxy(target_host, target_port):
    """Listens on 127.0.0.1; relays each connection to the target, holding
    every chunk of the server's replies back DELAY seconds (a constant
    latency: chunks keep their order and are not throttled). Returns the
    port."""
    ready = threading.Event()
    box = {}

    async def pipe(reader, writer, delay):
        q = asyncio.Queue()

        async def send():
            while True:
                due, data = await q.get()
                if data is None:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            writer.close()

        sender = asyncio.ensure_future(send())
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                q.put_nowait((time.monotonic() + delay, data))
        except ConnectionError:
            pass
        q.put_nowait((0, None))
        try:
            await sender
        except ConnectionError:
            pass

    async def handle(creader, cwriter):
        try:
            sreader, swriter = await asyncio.open_connection(target_host, target_port)
        except OSError:
            cwriter.close()
            return
        await asyncio.gather(pipe(creader, swriter, 0), pipe(sreader, cwriter, DELAY),
                             return_exceptions=True)

    async def main():
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        box["port"] = srv.sockets[0].getsockname()[1]
        ready.set()
        async with srv:
            await srv.serve_forever()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    ready.wait(10)
    return box["port"]


def through_proxy(u):
    parts = urllib.parse.urlsplit(u)
    proxy_port = start_proxy(parts.hostname, parts.port)
    netloc = parts.netloc.rsplit("@", 1)
    hostport = f"127.0.0.1:{proxy_port}"
    netloc = f"{netloc[0]}@{hostport}" if len(netloc) == 2 else hostport
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


# ---- the wait ---------------------------------------------------------

def wait_phase(uri):
    results = {}

    def run(who, timeout, hold, pool=None):
        args = {"uri": uri, "key": key, "timeout": timeout, "hold": hold}
        if pool:
            args["pool"] = pool
        try:
            results[who] = get("/nb/take", **args)
        except Exception as e:  # reported below
            results[who] = (0, repr(e))

    def stats():
        sent, begun = get("/nb/stats", uri=uri, key=key)[1].split()
        return int(sent), int(begun)

    sent_before = stats()[0]
    holder = threading.Thread(target=run, args=("holder", 5, HOLD))
    holder.start()
    time.sleep(0.2)
    # The short waiter first: its first try is not queued behind the others'.
    waiters = [threading.Thread(target=run, args=("short", SHORT, 0))]
    waiters += [threading.Thread(target=run, args=(f"w{i}", 60, 0.01,
                                                   "llnb" if server and i % 2 else None))
                for i in range(WAITERS)]
    for t in waiters:
        t.start()
    # The window opens once every request has begun on the worker.
    end = time.time() + 20
    while stats()[1] < len(waiters) + 1 and time.time() < end:
        time.sleep(0.02)

    pings = []
    window_from = time.time()

    def pinger():
        while holder.is_alive():
            t0 = time.time()
            try:
                status, body = get("/ping")
            except Exception as e:
                problems.append(f"/ping failed: {e!r}")
                return
            t1 = time.time()
            if status != 200 or body != "pong\n":
                problems.append(f"/ping answered {status} {body!r}")
            pings.append((t0, t1))

    pingers = [threading.Thread(target=pinger) for _ in range(PINGERS)]
    for t in pingers:
        t.start()
    holder.join()
    sent_at_release = stats()[0]
    for t in pingers + waiters:
        t.join()

    parsed = {}
    for who, (status, body) in results.items():
        f = body.split()
        if status != 200 or not f:
            problems.append(f"{who}: {status} {body!r}")
            continue
        parsed[who] = f
    h = parsed.get("holder")
    if not h or h[0] != "ok":
        problems.append(f"holder did not get the lock: {results.get('holder')}")
        return None
    h_acq, h_rel = float(h[3]), float(h[4])
    during = [(t0, t1) for t0, t1 in pings if t0 >= window_from and t1 <= h_rel]
    worst = max((t1 - t0 for t0, t1 in during), default=0)
    if h_rel <= window_from:
        problems.append(f"the waiting requests had not all begun {window_from - h_rel:.2f} s after "
                        f"the holder released: the event loop was blocked")
    elif len(during) < MIN_PINGS:
        problems.append(f"only {len(during)} /ping answered in the {h_rel - window_from:.2f} s "
                        f"the waiters waited (< {MIN_PINGS}): the event loop was blocked")
    if worst > PING_MAX:
        problems.append(f"slowest /ping took {worst * 1000:.1f} ms (> {PING_MAX * 1000:.0f} ms)")
    busy = sent_at_release - sent_before
    if busy < WAITERS:
        problems.append(f"only {busy} statements sent by busy tries while {WAITERS} waited")
    got = []
    for i in range(WAITERS):
        w = parsed.get(f"w{i}")
        if not w or w[0] != "ok":
            problems.append(f"waiter w{i}: {results.get(f'w{i}')}")
            continue
        fence, started, acquired, released = int(w[1]), float(w[2]), float(w[3]), float(w[4])
        if started >= window_from:
            problems.append(f"waiter w{i} started waiting after the pings began")
        got.append((acquired, released, fence))
    got.sort()
    prev_rel, prev_fence = h_rel, int(h[1])
    for acquired, released, fence in got:
        if acquired < prev_rel:
            problems.append(f"a waiter acquired at {acquired} before the previous holder "
                            f"released ({prev_rel}): overlap")
        if fence <= prev_fence:
            problems.append(f"fence {fence} after {prev_fence}: not increasing")
        prev_rel, prev_fence = released, fence
    s = parsed.get("short")
    waited = 0
    if not s or s[:2] != ["fail", "TIMEOUT"]:
        problems.append(f"short waiter: expected fail TIMEOUT, got {results.get('short')}")
    else:
        waited = float(s[3]) - float(s[2])
        if waited < SHORT - 0.05:
            problems.append(f"short waiter timed out after {waited:.3f} s (timeout {SHORT} s)")
    return (f"{WAITERS} waiters, {busy} statements of busy tries during the {h_rel - window_from:.2f} s "
            f"wait; {len(during)} /ping answered on the same worker meanwhile (slowest "
            f"{worst * 1000:.1f} ms); then {len(got)} turns in order (fences {got[0][2] if got else '-'}"
            f"..{got[-1][2] if got else '-'}); a {SHORT} s waiter got TIMEOUT after {waited:.3f} s")


# ---- the file locked by another process (SQLite) ----------------------

def locked_phase(uri):
    db = sqlite3.connect(uri[len("sqlite://"):], isolation_level=None, timeout=10)
    db.execute("BEGIN EXCLUSIVE")
    result, pings = {}, []
    try:
        t = threading.Thread(target=lambda: result.update(
            r=get("/nb/take", uri=uri, key=key + "/locked", timeout=LOCKED_WAIT, hold=0)))
        t.start()
        while t.is_alive():
            t0 = time.time()
            get("/ping")
            pings.append(time.time() - t0)
        t.join()
    finally:
        db.execute("ROLLBACK")
        db.close()
    status, body = result.get("r", (0, "no answer"))
    f = body.split()
    worst = max(pings, default=0)
    if f[:2] != ["fail", "TIMEOUT"]:
        problems.append(f"locked file: expected fail TIMEOUT, got {status} {body!r}")
        return None
    waited = float(f[3]) - float(f[2])
    if not LOCKED_WAIT - 0.05 <= waited <= LOCKED_WAIT + 1:
        problems.append(f"locked file: TIMEOUT after {waited:.3f} s (timeout {LOCKED_WAIT} s)")
    if worst > LOCKED_PING_MAX:
        problems.append(f"locked file: slowest /ping took {worst * 1000:.1f} ms "
                        f"(> {LOCKED_PING_MAX * 1000:.0f} ms): a try held the worker")
    return (f"the file locked by another process: TIMEOUT after {waited:.3f} s, "
            f"{len(pings)} /ping answered meanwhile (slowest {worst * 1000:.1f} ms)")


# ---- bad arguments and the parked lease (server backends) -------------

def bad_phase(uri):
    expected = [
        "bad argument #1 to 'acquire_nb' (pool: no thread pool \"ll_no_such_pool\" (nginx.conf",
        "bad argument #1 to 'acquire_nb' (pool: string expected, got number)",
        "bad argument #1 to 'acquire_nb' (timeout must be a finite number >= 0, got -1)",
        "false bad argument #1 to '_pool_try' (wait id: number expected, got string)",
        "false bad argument #1 to '_pool_try' (wait id must be an integer from 1 to 2^53)",
        "true nil GONE",
    ]
    lines = get("/nb/bad", uri=uri, key=key + "/bad")[1].splitlines()
    for want, line in zip(expected, lines + [""] * len(expected)):
        if want not in line:
            problems.append(f"bad arguments: expected {want!r}, got {line!r}")
    return f"{len(expected)} misuses raised"


def state(uri, k):
    return get("/nb/info", uri=uri, key=k)[1].split()[0]


def wait_for(uri, k, want, limit):
    end = time.time() + limit
    while time.time() < end:
        if state(uri, k) == want:
            return True
        time.sleep(0.05)
    return False


def parked_phase(uri, timer):
    reaped_by = ""
    if timer:
        reaped_by = reaped_phase(uri)
        if reaped_by is None:
            return "no parked lease"
    # Released by client:close().
    k2 = key + "/closed"
    get("/nb/abort", uri=uri, key=k2)
    if not wait_for(uri, k2, "held", 5):
        problems.append("second aborted request: its try took no lease")
    closed_body = get("/nb/close", uri=uri)[1].strip()
    if closed_body != "closed":
        problems.append(f"close: {closed_body}")
    if state(uri, k2) != "free":
        problems.append("client:close() did not release the parked lease")
    return reaped_by + "a lease parked for an aborted request was released by client:close()"


def reaped_phase(uri):
    # Released by acquire_nb's reaping timer in a pool thread, with no
    # other request to the worker than these /nb/info (made on the worker).
    k1 = key + "/aborted"
    get("/nb/abort", uri=uri, key=k1)
    if not wait_for(uri, k1, "held", 5):
        problems.append("aborted request: its try took no lease (nothing to test)")
        return None
    parked = time.time()
    time.sleep(PARKED_AGE - 1)
    if state(uri, k1) != "held":
        problems.append("the parked lease was released too early")
    if not wait_for(uri, k1, "free", 15):
        problems.append(f"the parked lease was still held {time.time() - parked:.1f} s after "
                        f"its request ended")
    reaped = time.time() - parked
    status, body = get("/nb/take", uri=uri, key=k1, timeout=0, hold=0)
    if not body.startswith("ok "):
        problems.append(f"after the reaping, the key could not be taken: {body!r}")
    return (f"a lease taken for an aborted request was released {reaped:.1f} s later by the "
            f"reaping timer (TTL 30 s); ")


if server:
    uri = through_proxy(uri)
report = [wait_phase(uri)]
if not server:
    report.append(locked_phase(uri))
if server:
    report.append(bad_phase(uri))
    report.append(parked_phase(uri, timer=name == "postgresql"))
if problems:
    print(f"FAIL: nb {name}:", "; ".join(problems))
    sys.exit(1)
print(f"ok: nb {name}:", "; ".join(r for r in report if r))
