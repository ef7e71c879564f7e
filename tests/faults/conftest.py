"""Fixtures of the fault suite. The server backends come from MONGODB_URI,
MYSQL_URI and POSTGRESQL_URI (tests/with-servers.sh starts them), the SQL
servers' restart commands from LEASELOCK_MYSQL_RESTART and
LEASELOCK_POSTGRESQL_RESTART. A missing variable stops the whole run with
an error: this suite never skips a backend silently.

Each server backend is reached through two Toxiproxy proxies, one per
client side (a and b), so a fault can hit one holder and spare the other.
"""
import os
import subprocess
import time
import uuid

import pytest

import faultlib
from faultlib import History, Holder, Stats

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

SERVERS = {"mongodb": "MONGODB_URI", "mysql": "MYSQL_URI", "postgresql": "POSTGRESQL_URI"}
RESTART = {"mysql": "LEASELOCK_MYSQL_RESTART", "postgresql": "LEASELOCK_POSTGRESQL_RESTART"}

# LEASELOCK_FAULTS_ROUNDS repeats every scenario (make stress: the long run).
ROUNDS = int(os.environ.get("LEASELOCK_FAULTS_ROUNDS", "1"))


def pytest_sessionstart(session):
    missing = [v for v in list(SERVERS.values()) + list(RESTART.values()) if not os.environ.get(v)]
    if missing:
        raise pytest.UsageError(
            f"faults: {', '.join(missing)} not set: run through tests/with-servers.sh "
            "(make test does), or set them; this suite does not skip a backend")
    Stats.t0 = time.monotonic()


def pytest_generate_tests(metafunc):
    if "rnd" in metafunc.fixturenames:
        metafunc.parametrize("rnd", range(ROUNDS), ids=lambda r: f"r{r}")


@pytest.fixture(scope="session")
def toxiproxy(tmp_path_factory):
    binary = os.environ.get("TOXIPROXY_BIN") or subprocess.run(
        ["bash", os.path.join(HERE, "install-toxiproxy.sh")], check=True,
        capture_output=True, text=True).stdout.strip()
    tp = faultlib.Toxiproxy(binary, str(tmp_path_factory.mktemp("toxiproxy")))
    yield tp
    tp.close()


@pytest.fixture(scope="session")
def proxies(toxiproxy):
    out = {}
    for name, var in SERVERS.items():
        up = faultlib.upstream_of(os.environ[var])
        out[name] = (toxiproxy.proxy(f"{name}_a", up), toxiproxy.proxy(f"{name}_b", up))
    return out


# I/O bounds in step with the suite's sub-second TTLs (the defaults, 5 to
# 10 s a call, suit the default 30 s TTL): a call stuck on a silent
# connection ends well within the time the scenarios wait for it.
BOUNDS = {
    "mongodb": "socketTimeoutMS=1500&connectTimeoutMS=2000&serverSelectionTimeoutMS=2000",
    "mysql": "io_timeout=1&connect_timeout=2",
    "postgresql": "io_timeout=1s&connect_timeout=2",
}
# The longest one call may take with those bounds (connect + I/O + a
# resend on a fresh connection), with slack for a loaded machine.
CALL_BOUND = 10.0


def bounded(backend, uri):
    return uri + ("&" if "?" in uri else "?") + BOUNDS[backend]


class Env:
    """One scenario on one backend: the key, its history, the fenced
    store, the URIs of side a and b, and the holders started."""

    def __init__(self, backend, tmp_path, proxies):
        self.backend = backend
        self.key = f"faults/{backend}/{uuid.uuid4().hex[:12]}"
        self.history = History(self.key)
        self.store = str(tmp_path / "fenced-store")
        self.tmp = tmp_path
        self.holders = []
        if backend == "sqlite":
            self.pa = self.pb = None
            self.uri_a = self.uri_b = f"sqlite://{tmp_path}/locks.db"
        else:
            self.pa, self.pb = proxies[backend]
            uri = bounded(backend, os.environ[SERVERS[backend]])
            self.uri_a = faultlib.via(uri, self.pa.listen)
            self.uri_b = faultlib.via(uri, self.pb.listen)

    def holder(self, name, side="a", env=None):
        h = Holder(name, self.uri_a if side == "a" else self.uri_b, self.history, env)
        self.holders.append(h)
        return h

    def clear(self):
        for p in (self.pa, self.pb):
            if p is not None:
                p.clear()
                p.enable(True)

    def close(self):
        self.clear()
        for h in self.holders:
            h.close()


@pytest.fixture(params=list(SERVERS))
def server(request, tmp_path, proxies):
    e = Env(request.param, tmp_path, proxies)
    e.clear()
    yield e
    e.close()
    Stats.scenarios += 1


@pytest.fixture(params=["sqlite"] + list(SERVERS))
def anybackend(request, tmp_path, proxies):
    e = Env(request.param, tmp_path, proxies)
    e.clear()
    yield e
    e.close()
    Stats.scenarios += 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not hasattr(Stats, "t0"):
        return
    secs = time.monotonic() - Stats.t0
    kinds = " ".join(f"{k}={v}" for k, v in sorted(Stats.by_kind.items()))
    terminalreporter.write_line(
        f"faults: {Stats.scenarios} scenarios, {Stats.faults} faults injected ({kinds}), "
        f"{Stats.grants} grants checked, {Stats.losses} losses reported, "
        f"{Stats.violations} violations, {secs:.0f} s")
    # tests/faults/run.sh adds up the groups' lines.
    out = os.environ.get("FAULTS_SUMMARY")
    if out:
        with open(out, "w") as f:
            f.write(f"scenarios={Stats.scenarios} faults={Stats.faults} grants={Stats.grants} "
                    f"losses={Stats.losses} violations={Stats.violations}\n")
