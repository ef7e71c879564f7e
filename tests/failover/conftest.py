"""Fixtures of the failover suite: replicated topologies
(tests/topology/) started by the suite itself, and the clients' URIs.

The fixture `topology` starts a fresh topology for each test and stops it
afterwards. A test names the kinds it runs on with
@pytest.mark.topologies("pg-async", ...) (default: every kind of
tests/topology/__init__.py); a kind whose module is not written yet is
skipped, saying so. LEASELOCK_FAILOVER_ROUNDS repeats every test (the
parameter `rnd`, as in the fault suite). With STRESS_OUT set, the run
writes one summary per topology there (failovers, scenarios, failures,
the failovers' and the keys' unavailability, p50 and p99 in ms) for the
`make stress` table.

Every client URI carries max_ttl (MAX_TTL): the longest lease a client
may take, and so the lock-delay after a failover. A build that does not
know the option yet (libpq refuses it) gets the URI without it, with a
warning, so that the scenarios show what they are for.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path.insert(0, TESTS)

import leaselock  # noqa: E402
from topology import KINDS, make_topology  # noqa: E402

ROUNDS = int(os.environ.get("LEASELOCK_FAILOVER_ROUNDS", "1"))

# The longest TTL the clients may ask for: after a failover, a key whose
# last grant may have been lost is refused for this long.
MAX_TTL = 3.0
LOCK_DELAY = MAX_TTL
# How long a key may stay unavailable after the new primary takes writes.
UNAVAILABLE_MAX = LOCK_DELAY + 2.0
# How late an on_lost may come after the deadline it reports (the
# renewal thread wakes at the deadline, then the callback needs the GIL).
LOST_SLACK = 0.3

# Per backend (the module of KINDS): I/O bounds in step with the short
# TTLs, so that a call on a dead connection ends well within the
# lock-delay.
BOUNDS = {
    "postgresql": {"connect_timeout": "2", "io_timeout": "1s"},
    "mariadb": {"connect_timeout": "2", "io_timeout": "1"},
    "galera": {"connect_timeout": "2", "io_timeout": "1"},
}


class Figures:
    """Per topology: its failovers' durations (kill or cut to writes taken)
    and how long after a promotion keys were unavailable, in seconds; the
    scenarios run and failed."""

    failovers: dict = collections.defaultdict(list)
    unavailable: dict = collections.defaultdict(list)
    scenarios: dict = collections.Counter()
    failures: dict = collections.Counter()


def unavailable_for(topo, seconds: float) -> None:
    """A key was granted `seconds` after the new primary took writes."""
    Figures.unavailable[topo.name].append(seconds)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "topologies(*names): the kinds of topology a test runs on (default: all)")


def pytest_generate_tests(metafunc):
    if "topology" in metafunc.fixturenames:
        m = metafunc.definition.get_closest_marker("topologies")
        names = list(m.args) if m else list(KINDS)
        metafunc.parametrize("topology", names, indirect=True)
    if "rnd" in metafunc.fixturenames:
        metafunc.parametrize("rnd", range(ROUNDS), ids=lambda r: f"r{r}")


def module_of(name: str) -> str:
    return KINDS[name][0]


@pytest.fixture
def topology(request, tmp_path):
    name = request.param
    module = module_of(name)
    if importlib.util.find_spec(f"topology.{module}") is None:
        pytest.skip(f"{name}: tests/topology/{module}.py is not written yet")
    topo = make_topology(name, str(tmp_path / name))
    failover = topo.failover

    def counted(how: str = "kill"):
        t = failover(how)
        Figures.failovers[name].append(t.promoted - t.began)
        return t

    topo.failover = counted
    t0 = time.monotonic()
    try:
        topo.start()
        print(f"\n{name}: started in {time.monotonic() - t0:.2f} s")
        yield topo
    finally:
        topo.stop()


@pytest.fixture
def connect(topology):
    """connect(uri, label): a leaselock client, closed after the test
    (before its topology stops)."""
    made = []

    def make(uri: str, label: str):
        c = leaselock.connect(uri, label=label)
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.close()
        except leaselock.LockError:
            pass  # a lease the failover took away: the test's business


def client_uri(topo, bounded: bool = True, **options: str) -> str:
    """The multi-host URI the clients use, in the form users write first
    (every node in the authority): max_ttl, the I/O bounds (bounded) and
    options."""
    opts = dict(BOUNDS.get(module_of(topo.name), {})) if bounded else {}
    opts.update(options)
    if getattr(topo, "uri_forms", None):
        topo.uri_form = topo.uri_forms[0]
    return topo.uri(**dict(opts, max_ttl=f"{MAX_TTL:g}s"))


# One call's longest run with the bounds of BOUNDS (connect 2 s
# + I/O 1 s, and a resend), with slack for a loaded machine.
CALL_BOUND = 7.0


class LossWatch:
    """on_lost of a Lock: when each fence was reported lost."""

    def __init__(self) -> None:
        self.at: dict = {}
        self.mu = threading.Lock()

    def __call__(self, lease) -> None:
        with self.mu:
            self.at[lease.fence] = time.monotonic()


def first_grant(lock, give_up: float) -> tuple:
    """Tries the key once every 50 ms until granted or give_up (a
    monotonic time): (lease or None, when the granting try returned, how
    many tries were refused as busy, the errors seen)."""
    busy, errors = 0, []
    while time.monotonic() < give_up:
        try:
            lease = lock.try_acquire()
        except leaselock.LockError as e:  # the new primary not reached yet
            errors.append(f"{type(e).__name__}: {e}")
            lease = None
        else:
            if lease is not None:
                return lease, time.monotonic(), busy, errors
            busy += 1
        time.sleep(0.05)
    return None, None, busy, errors


def check_lost_grant(topo, connect, uri: str, a, key: str, how: str, label: str,
                     node: str) -> None:
    """A (client a, on uri) is granted key while replication is paused, so
    the grant never reaches the `node` (standby, replica); the primary is
    failed over (how). B, a new client, must be refused the key until A's
    lease has run out (the lock-delay), then be granted it within the
    lock-delay + 2 s of the promotion; A learns of its loss by its
    deadline. The table and its record of the primary reach the `node`
    first (a warm-up grant, then the replication caught up): a failover
    within the replication lag of a table's first use is not protected
    (docs/contract.md, "Failover")."""
    a.lock("failover/warm-up", ttl=MAX_TTL).acquire(timeout=5).release()
    topo.wait_replicated()
    lost = LossWatch()
    topo.pause_replication()
    lease_a = a.lock(key, ttl=MAX_TTL, on_lost=lost).acquire(timeout=5)
    a_deadline = deadline_of(lease_a)
    assert not topo.has_everything(), f"A's grant reached the {node}: the scenario did not run"
    times = topo.failover(how)
    # A's renewals may have moved its deadline before the failover.
    a_deadline = max(a_deadline, deadline_of(lease_a) or 0.0)
    b = connect(uri, "B")
    lease_b, granted, busy, errors = first_grant(b.lock(key, ttl=MAX_TTL),
                                                 times.promoted + UNAVAILABLE_MAX + CALL_BOUND)
    if lease_b is None:
        pytest.fail(f"B was never granted the key ({busy} tries refused, errors: {errors[-3:]})")
    after = granted - times.promoted
    unavailable_for(topo, after)
    report(f"{label}: {how} failover {times.promoted - times.began:.3f} s; B granted fence "
           f"{lease_b.fence} {after:.2f} s after the promotion ({busy} tries refused before); "
           f"A's lease ran until {a_deadline - times.promoted:+.2f} s")
    assert granted >= a_deadline, (
        f"double grant: B was granted the key (fence {lease_b.fence}) {after:.2f} s after the "
        f"promotion while A's lease (fence {lease_a.fence}) had {a_deadline - granted:.2f} s "
        f"left; the grant the old primary made was lost with it")
    assert after <= UNAVAILABLE_MAX, (
        f"the key was unavailable {after:.2f} s after the promotion (lock-delay "
        f"{LOCK_DELAY:g} s + 2 s allowed)")
    # A's renewals found the loss, by its deadline.
    assert not lease_a.held
    with lost.mu:
        at = lost.at.get(lease_a.fence)
    assert at is not None, "A's on_lost never ran"
    assert at <= a_deadline + LOST_SLACK, (
        f"A's loss was reported {at - a_deadline:.2f} s after its deadline")
    lease_b.release()


def deadline_of(lease) -> float | None:
    """The lease's local deadline on time.monotonic(), or None once it is
    not held (as tests/faults/holder.py reads it)."""
    rem = lease.expires_in
    t1 = time.monotonic()  # after the read: the later bound
    if not lease.held:
        return None
    return t1 + rem


def report(line: str) -> None:
    """A figure of the run, shown with pytest -s and kept in the captured
    output of a failure."""
    print(line, flush=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    params = getattr(getattr(item, "callspec", None), "params", {})
    name = params.get("topology")
    if name is None or rep.skipped:
        return
    if rep.when == "call":
        Figures.scenarios[name] += 1
    if rep.failed:
        Figures.failures[name] += 1


def _pct(values: list, q: float) -> int:
    if not values:
        return 0
    v = sorted(values)
    return round(1000 * v[min(len(v) - 1, int(q * len(v)))])


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    out = os.environ.get("STRESS_OUT")
    for name in sorted(Figures.scenarios):
        f, u = Figures.failovers[name], Figures.unavailable[name]
        fields = {"tool": "failover", "backend": name, "failovers": len(f),
                  "scenarios": Figures.scenarios[name], "failures": Figures.failures[name],
                  "failover_p50_ms": _pct(f, 0.5), "failover_p99_ms": _pct(f, 0.99),
                  "unavailable_p50_ms": _pct(u, 0.5), "unavailable_p99_ms": _pct(u, 0.99)}
        terminalreporter.write_line("failover: " + " ".join(f"{k}={v}" for k, v in fields.items()))
        if out:
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, f"failover-{name}.summary"), "w") as fh:
                fh.write("".join(f"{k}={v}\n" for k, v in fields.items()))
