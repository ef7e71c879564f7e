"""Shared pieces of the fault suite: the Toxiproxy client, the fenced store,
holder processes and the history checker.

Every time here is CLOCK_MONOTONIC (time.monotonic()), which is one clock
for every process on the machine, so grants recorded by different
processes can be compared. Clients under libfaketime keep the real
monotonic clock (FAKETIME_DONT_FAKE_MONOTONIC=1): the suite moves their
wall clock only, which is what the contract says must not matter.
"""
from __future__ import annotations

import fcntl
import glob
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))

# How late on_lost may arrive after the local deadline it reports: the
# renewal thread wakes at the deadline, then the callback needs the GIL,
# and on a shared two-core machine (load 8 seen) a thread can wait that
# long for a core. Not a margin of the lock: a grant that overlaps another
# is judged on the deadline itself.
LOST_SLACK = float(os.environ.get("LEASELOCK_FAULTS_LOST_SLACK", "0.3"))


class Stats:
    """What the whole run did: the summary line and STRESS_OUT's file."""

    faults = 0
    grants = 0
    losses = 0
    violations = 0
    scenarios = 0
    by_kind: dict = {}

    @classmethod
    def fault(cls, kind: str, n: int = 1) -> None:
        cls.faults += n
        cls.by_kind[kind] = cls.by_kind.get(kind, 0) + n


# ---- Toxiproxy -------------------------------------------------------------

class Toxiproxy:
    """Toxiproxy's HTTP API on 127.0.0.1 only."""

    def __init__(self, binary: str, workdir: str) -> None:
        self.log = open(os.path.join(workdir, "toxiproxy.log"), "wb")
        port = _free_port()
        self.api = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([binary, "-host", "127.0.0.1", "-port", str(port)],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                self._call("GET", "/version")
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"toxiproxy did not start (see {self.log.name})")
                time.sleep(0.05)

    def _call(self, method: str, path: str, body: object = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.api + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read()
        try:
            return json.loads(text) if text.strip() else None
        except ValueError:  # /version answers plain text in v2.5
            return text.decode(errors="replace")

    def proxy(self, name: str, upstream: str) -> "Proxy":
        host, port = upstream.rsplit(":", 1)
        assert host.startswith("127."), f"upstream {upstream} is outside 127.0.0.0/8"
        try:
            self._call("DELETE", f"/proxies/{name}")
        except urllib.error.HTTPError:
            pass
        p = self._call("POST", "/proxies",
                       {"name": name, "listen": "127.0.0.1:0", "upstream": upstream})
        return Proxy(self, name, p["listen"])

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Proxy:
    def __init__(self, tp: Toxiproxy, name: str, listen: str) -> None:
        self.tp, self.name, self.listen = tp, name, listen
        self.n = 0

    def toxic(self, kind: str, stream: str = "downstream", toxicity: float = 1.0,
              **attributes: object) -> str:
        self.n += 1
        name = f"{kind}_{stream}_{self.n}"
        self.tp._call("POST", f"/proxies/{self.name}/toxics",
                      {"name": name, "type": kind, "stream": stream, "toxicity": toxicity,
                       "attributes": attributes})
        Stats.fault(kind)
        return name

    def clear(self) -> None:
        for t in self.tp._call("GET", f"/proxies/{self.name}/toxics") or []:
            self.tp._call("DELETE", f"/proxies/{self.name}/toxics/{t['name']}")

    def enable(self, on: bool) -> None:
        """Disabled: every connection through it is closed and new ones are
        refused (the server looks stopped)."""
        self.tp._call("POST", f"/proxies/{self.name}", {"enabled": on})
        if not on:
            Stats.fault("proxy_down")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def via(uri: str, listen: str) -> str:
    """uri with its host:port replaced by listen (a proxy's address)."""
    u = urllib.parse.urlsplit(uri)
    if u.hostname is None or not u.hostname.startswith("127."):
        raise ValueError(f"the suite only runs against 127.0.0.0/8 (host {u.hostname!r})")
    userinfo, _, _ = u.netloc.rpartition("@")
    netloc = (userinfo + "@" if userinfo else "") + listen
    return urllib.parse.urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))


def upstream_of(uri: str) -> str:
    u = urllib.parse.urlsplit(uri)
    return f"{u.hostname}:{u.port}"


# ---- the fenced store ----------------------------------------------------------

class FencedStore:
    """The downstream store of the fencing example (docs/concepts.md): a file that
    keeps the largest fence it has accepted and refuses a write carrying a
    smaller one. flock makes the compare-and-write atomic across processes."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, fence: int, data: str) -> tuple:
        """(accepted, largest fence seen before this write)."""
        with open(self.path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            lines = f.read().splitlines()
            seen = int(lines[0]) if lines else 0
            if fence < seen:
                return False, seen
            f.seek(0)
            f.truncate()
            f.write(f"{fence}\n{data}\n")
            return True, seen


# ---- holder processes ------------------------------------------------------

def faketime_lib() -> str:
    libs = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1") +
                  glob.glob("/usr/lib/faketime/libfaketimeMT.so.1"))
    if not libs:
        raise RuntimeError("libfaketime is missing (make deps installs it)")
    return libs[0]


def faketime_env(spec: str | None = None, stamp_file: str | None = None) -> dict:
    """Environment for a client whose wall clock is off (FAKETIME, e.g.
    "+1h") or follows a timestamp file the test rewrites (a clock step)."""
    # FAKETIME_FORCE_MONOTONIC_FIX=0: with the monotonic clock left real,
    # libfaketime 0.9.10's pthread_cond_timedwait wrapper otherwise turns
    # every timed wait on a CLOCK_MONOTONIC condition variable into an
    # immediate timeout, and the core's renewal threads spin on a core
    # each (measured: 2 s of CPU in 2 s), which starves everything else.
    env = {"LD_PRELOAD": faketime_lib(), "FAKETIME_DONT_FAKE_MONOTONIC": "1",
           "FAKETIME_FORCE_MONOTONIC_FIX": "0"}
    if spec is not None:
        env["FAKETIME"] = spec
    if stamp_file is not None:
        env["FAKETIME_TIMESTAMP_FILE"] = stamp_file
        env["FAKETIME_NO_CACHE"] = "1"
    return env


class HolderDied(AssertionError):
    pass


class Holder:
    """A client in a process of its own (tests/faults/holder.py), driven
    by JSON lines: it can be SIGKILLed, SIGSTOPped or run under faketime.
    It keeps one leaselock client for its whole life."""

    def __init__(self, name: str, uri: str, history: "History", env: dict | None = None) -> None:
        self.name, self.history = name, history
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "holder.py"), name, uri],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=None, env=e, text=True, bufsize=1)
        self.replies: "queue.Queue[dict]" = queue.Queue()
        self.lost: dict = {}
        self.stopped = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.call("hello", wait=30)

    def _read(self) -> None:
        for line in self.proc.stdout:
            ev = json.loads(line)
            kind = ev.pop("ev")
            if kind == "reply":
                self.replies.put(ev)
            else:
                self.history.event(self.name, kind, ev)
                if kind == "lost":
                    self.lost[ev["fence"]] = ev["t"]
        self.replies.put({"died": True})

    def send(self, op: str, **args: object) -> None:
        args["op"] = op
        self.proc.stdin.write(json.dumps(args) + "\n")
        self.proc.stdin.flush()

    def reply(self, wait: float = 20) -> dict:
        try:
            r = self.replies.get(timeout=wait)
        except queue.Empty:
            raise AssertionError(f"holder {self.name}: no reply in {wait} s "
                                 "(a call hangs: an unbounded wait on the database?)") from None
        if r.get("died"):
            raise HolderDied(f"holder {self.name} exited (rc {self.proc.poll()})")
        if "crash" in r:
            raise AssertionError(f"holder {self.name}: {r['crash']}")
        return r

    def call(self, op: str, wait: float = 20, **args: object) -> dict:
        """Sends op and waits up to `wait` seconds for its reply."""
        self.send(op, **args)
        return self.reply(wait)

    def signal(self, sig: int) -> None:
        self.history.note(self.name, f"signal {signal.Signals(sig).name}")
        os.kill(self.proc.pid, sig)
        if sig == signal.SIGSTOP:
            self.stopped = True
        Stats.fault(signal.Signals(sig).name)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(10)
        self.history.killed(self.name)

    def close(self) -> None:
        if self.proc.poll() is None:
            if self.stopped:
                os.kill(self.proc.pid, signal.SIGCONT)
            try:
                self.send("quit")
                self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.reader.join(5)


# ---- the history -----------------------------------------------------------

class History:
    """Every grant of one key: (who, fence, acquire returned, end), where
    end is when the holder's release was sent, else its local deadline
    (the latest one it reported). The checker proves that each grant
    starts at or after the end of every earlier one, that fences grow with
    the start times, and that every loss was reported by the deadline."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.mu = threading.Lock()
        self.grants: dict = {}  # (who, fence) -> dict
        self.notes: list = []
        self.stop_exempt: set = set()  # (who, fence) lost while stopped

    def _g(self, who: str, fence: int) -> dict:
        g = self.grants.get((who, fence))
        if g is None:
            g = self.grants[(who, fence)] = {"who": who, "fence": fence, "start": None,
                                             "deadline": 0.0, "released": None, "lost": None}
        return g

    def event(self, who: str, kind: str, ev: dict) -> None:
        with self.mu:
            if ev.get("key", self.key) != self.key:
                return
            if kind == "acquired":
                g = self._g(who, ev["fence"])
                g["start"] = ev["t"]
                g["deadline"] = max(g["deadline"], ev["deadline"])
            elif kind == "deadline":
                g = self._g(who, ev["fence"])
                g["deadline"] = max(g["deadline"], ev["d"])
            elif kind == "release_sent":
                self._g(who, ev["fence"])["released"] = ev["t"]
            elif kind == "lost":
                self._g(who, ev["fence"])["lost"] = ev["t"]
            elif kind == "log":
                self.notes.append((time.monotonic(), who, ev["msg"]))

    def note(self, who: str, msg: str) -> None:
        with self.mu:
            self.notes.append((time.monotonic(), who, msg))

    def killed(self, who: str) -> None:
        self.note(who, "killed")

    def exempt_stopped(self, who: str) -> None:
        """Its leases were lost while the process was stopped: the callback
        can only come after SIGCONT."""
        with self.mu:
            for (w, f), g in self.grants.items():
                if w == who and g["lost"] is None:
                    self.stop_exempt.add((w, f))

    def check(self, count: bool = True) -> list:
        """The violations (empty when the history is sound); count: add
        them to the run's figures (not for the checker's own tests)."""
        with self.mu:
            grants = [dict(g) for g in self.grants.values() if g["start"] is not None]
            exempt = set(self.stop_exempt)
        bad = []
        for g in grants:
            end = g["deadline"]
            if g["released"] is not None:
                end = min(end, g["released"])
            g["end"] = end
        grants.sort(key=lambda g: (g["start"], g["fence"]))
        prev = None
        for g in grants:
            if prev is not None:
                if g["fence"] <= prev["fence"]:
                    bad.append(f"fence did not grow: {_fmt(prev)} then {_fmt(g)}")
                if g["start"] < prev["end"] and g["who"] != prev["who"]:
                    bad.append(f"double grant: {_fmt(g)} started "
                               f"{(prev['end'] - g['start']) * 1000:.1f} ms before the end of "
                               f"{_fmt(prev)}")
                elif g["start"] < prev["end"]:
                    # The same client: a re-acquire is only legal once the
                    # previous lease ended for it too.
                    bad.append(f"overlap within one client: {_fmt(g)} during {_fmt(prev)}")
            if prev is None or g["end"] > prev["end"]:
                prev = g
        for g in grants:
            if g["lost"] is not None and (g["who"], g["fence"]) not in exempt:
                late = g["lost"] - g["deadline"]
                if late > LOST_SLACK:
                    bad.append(f"loss reported {late * 1000:.0f} ms after the local deadline: "
                               f"{_fmt(g)}")
        if count:
            Stats.grants += len(grants)
            Stats.losses += sum(1 for g in grants if g["lost"] is not None)
            Stats.violations += len(bad)
        return bad

    def dump(self) -> str:
        with self.mu:
            rows = sorted((g for g in self.grants.values() if g["start"] is not None),
                          key=lambda g: g["start"])
            lines = [_fmt(g) for g in rows]
            lines += [f"  {t:.3f} {who}: {msg}" for t, who, msg in self.notes]
        return "\n".join(lines)


def _fmt(g: dict) -> str:
    s = f"{g['who']} fence {g['fence']} [{g['start']:.3f}"
    if g.get("released") is not None:
        s += f", released {g['released']:.3f}"
    s += f", deadline {g['deadline']:.3f}"
    if g.get("lost") is not None:
        s += f", lost reported {g['lost']:.3f}"
    return s + "]"


def assert_sound(history: History) -> None:
    bad = history.check()
    assert not bad, "\n".join(bad) + "\n--- history\n" + history.dump()


def wait_for(pred, timeout: float, what: str, step: float = 0.02) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)
