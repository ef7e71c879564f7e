"""What every topology shares: its own Toxiproxy server (the client of
tests/faults/faultlib.py, imported from there), free ports, and killing
what is left of a server.

TOXIPROXY_BIN names the server's binary (mk/failover.mk sets it);
without it, tests/faults/install-toxiproxy.sh builds it once.
"""

from __future__ import annotations

import os
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pids_in(directory: str) -> list[int]:
    """The processes whose working directory is `directory` (a server
    chdirs to its data directory: its children are found this way even
    after the parent died and they were re-parented)."""
    out = []
    real = os.path.realpath(directory)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{d}/cwd") == real:
                out.append(int(d))
        except OSError:
            pass
    return out


def kill_all_in(directory: str, first: int | None = None, timeout: float = 10.0) -> None:
    """SIGKILLs `first` (the server's main process), then every process
    left in `directory`, until none is left."""
    if first is not None:
        try:
            os.kill(first, signal.SIGKILL)
        except ProcessLookupError:
            pass
    end = time.monotonic() + timeout
    while True:
        pids = pids_in(directory)
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
