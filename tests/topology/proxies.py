"""What every topology shares: its own Toxiproxy server (the client of
tests/faults/faultlib.py, imported from there), free ports, killing what
is left of a server, and a reaper that stops a topology whose owner died
without stopping it (a test run killed by its timeout).

TOXIPROXY_BIN names the server's binary (mk/failover.mk sets it);
without it, tests/faults/install-toxiproxy.sh builds it once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TESTS, "faults"))

import faultlib  # noqa: E402

Toxiproxy = faultlib.Toxiproxy
Proxy = faultlib.Proxy


def toxiproxy_binary() -> str:
    binary = os.environ.get("TOXIPROXY_BIN")
    if binary:
        return binary
    return subprocess.run(["bash", os.path.join(TESTS, "faults", "install-toxiproxy.sh")],
                          check=True, capture_output=True, text=True).stdout.strip()


def start_toxiproxy(workdir: str) -> faultlib.Toxiproxy:
    """A Toxiproxy server of the topology's own on 127.0.0.1, its log in
    workdir."""
    return faultlib.Toxiproxy(toxiproxy_binary(), workdir)


def set_upstream(proxy: faultlib.Proxy, upstream: str) -> None:
    """Points the proxy at another address (enabling it)."""
    proxy.tp._call("POST", f"/proxies/{proxy.name}", {"upstream": upstream, "enabled": True})


class Silent:
    """An address that accepts TCP connections and never answers: a proxy
    pointed at it makes a node look partitioned away (a client's connect
    or call waits until its own timeout), not stopped (refused at once)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        self.sock.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pids_in(directory: str, below: bool = False) -> list[int]:
    """The processes whose working directory is `directory` (or, below,
    anywhere under it): a server chdirs to its data directory, so its
    children are found this way even after the parent died and they were
    re-parented."""
    out = []
    real = os.path.realpath(directory)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{d}/cwd")
        except OSError:
            continue
        if cwd == real or (below and cwd.startswith(real + "/")):
            out.append(int(d))
    return out


def kill_all_in(directory: str, first: int | None = None, timeout: float = 10.0,
                below: bool = False) -> None:
    """SIGKILLs `first` (the server's main process), then every process
    left in `directory` (below: or under it), until none is left."""
    if first is not None:
        try:
            os.kill(first, signal.SIGKILL)
        except ProcessLookupError:
            pass
    end = time.monotonic() + timeout
    while True:
        pids = pids_in(directory, below)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > end:
            raise RuntimeError(f"processes {pids} in {directory} survive SIGKILL")
        time.sleep(0.01)


def start_reaper(roots: list[str], pids: list[int]) -> subprocess.Popen:
    """A process that waits for this one to end and then SIGKILLs `pids`
    and every process working under `roots`, and removes `roots`. The
    topology's stop() ends it first (stop_reaper)."""
    spec = json.dumps({"owner": os.getpid(), "roots": roots, "pids": pids})
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "reap", spec],
                            stdin=subprocess.DEVNULL, start_new_session=True)


def stop_reaper(reaper: subprocess.Popen | None) -> None:
    if reaper is not None and reaper.poll() is None:
        reaper.kill()
        reaper.wait()


def _reap(spec: dict) -> None:
    while True:
        try:
            os.kill(spec["owner"], 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    for pid in spec["pids"]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for root in spec["roots"]:
        if os.path.isdir(root):
            kill_all_in(root, below=True)
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__" and sys.argv[1:2] == ["reap"]:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is the owner's
    _reap(json.loads(sys.argv[2]))
