"""Fixtures: every test that takes `uri` runs on embedded SQLite and on each
server whose variable is set (MONGODB_URI, MYSQL_URI, POSTGRESQL_URI; the
test command, tests/with-servers.sh, starts them)."""
import os
import uuid

import pytest

import leaselock

def pytest_configure(config):
    # run_versions.sh leaves these out on the other CPython versions: they
    # mostly wait (leases running out, renewals, process hand-offs), and the
    # python suite runs them with the default interpreter on every backend.
    config.addinivalue_line("markers", "slow: mostly waits; skipped by the version matrix")


BACKENDS = [("sqlite", None), ("mongodb", "MONGODB_URI"), ("mysql", "MYSQL_URI"),
            ("postgresql", "POSTGRESQL_URI")]

# Where the tests marked slow run: the embedded default and a server with
# notification. What they wait for (renewals, wake-ups, hand-offs between
# processes) is the core's, which the C suites run on every backend; here
# they check the binding's side of it, the same on each.
SLOW_BACKENDS = ("sqlite", "postgresql")


def pytest_collection_modifyitems(config, items):
    for item in items:
        backend = getattr(item, "callspec", None) and item.callspec.params.get("uri")
        if item.get_closest_marker("slow") and backend and backend not in SLOW_BACKENDS:
            item.add_marker(pytest.mark.skip(
                reason=f"mostly waits: the python suite runs it on {' and '.join(SLOW_BACKENDS)}"))


def _params():
    out = []
    for name, var in BACKENDS:
        if var is None:
            out.append(pytest.param(name, id=name))
        elif os.environ.get(var):
            out.append(pytest.param(name, id=name))
    return out


@pytest.fixture(params=_params())
def uri(request, tmp_path):
    name = request.param
    if name == "sqlite":
        return f"sqlite://{tmp_path}/locks.db"
    var = dict(BACKENDS)[name]
    return os.environ[var]


@pytest.fixture
def sqlite_uri(tmp_path):
    return f"sqlite://{tmp_path}/locks.db"


@pytest.fixture
def key():
    """A key no other test (or earlier run on the same server) uses."""
    return f"pytest/{uuid.uuid4().hex}"


@pytest.fixture
def client(uri):
    c = leaselock.connect(uri, label="pytest")
    yield c
    c.close()


@pytest.fixture
def other(uri):
    """A second client on the same database: another owner."""
    c = leaselock.connect(uri, label="pytest-other")
    yield c
    c.close()
