"""Security: Hypothesis on the argument handling (every input gives a value
or a clear ValueError / TypeError / LockError, never a crash or
SystemError), and no password from a URI in any error, repr or str."""
import pytest

import leaselock

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

CLEAR = (ValueError, TypeError, leaselock.LockError)
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

anything = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-10**400, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(), st.binary(),
    st.lists(st.integers(), max_size=3), st.just(object()))
keys = st.one_of(st.text(max_size=300), st.text(alphabet=st.characters(), max_size=80), anything)
durations = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                      st.integers(min_value=-10**30, max_value=10**30), anything)


def _call(fn):
    try:
        return fn()
    except CLEAR:
        return None
    except SystemError as e:  # an exception set wrongly by the extension
        raise AssertionError(f"SystemError: {e}") from e


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    c = leaselock.connect(f"sqlite://{tmp_path_factory.mktemp('sec')}/locks.db")
    yield c
    c.close()


@FAST
@given(key=keys, ttl=durations, min_hold=durations)
def test_lock_arguments(client, key, ttl, min_hold):
    lock = _call(lambda: client.lock(key, ttl=ttl, min_hold=min_hold))
    if lock is not None:
        lease = _call(lambda: lock.try_acquire())
        if lease is not None:
            lease.release()


@FAST
@given(key=keys, timeout=durations)
def test_acquire_timeouts(client, key, timeout):
    lock = _call(lambda: client.lock(key, ttl=5))
    if lock is not None:
        lease = _call(lambda: lock.acquire(timeout=timeout))
        if lease is not None:
            lease.release()


@FAST
@given(ttl=durations)
def test_renew_ttls(client, ttl):
    lease = client.lock("renew-target", ttl=5).acquire(timeout=1)
    try:
        _call(lambda: lease.renew(ttl=ttl))
    finally:
        lease.release()


@FAST
@given(key=keys)
def test_inspect_list_force(client, key):
    _call(lambda: client.info(key))
    _call(lambda: client.locks(key))
    _call(lambda: client.force_release(key))


@FAST
@given(label=keys)
def test_labels(tmp_path, label):
    c = _call(lambda: leaselock.Client(f"sqlite://{tmp_path}/l.db", label=label))
    if c is not None:
        c.close()


SECRET = "Pw9DistinctSecret"
URIS = [
    f"postgresql://u:{SECRET}@/db?host=/nonexistent-ll-dir",
    f"postgresql://u@/db?host=/nonexistent-ll-dir&application_name=a@b&password={SECRET}",
    f"postgresql://u@/db?host=/nonexistent-ll-dir&pass%77ord={SECRET}&sslpassword={SECRET}",
    f"postgresql://u:{SECRET}@evil@127.0.0.1/db",
    f"mysql://u:{SECRET}@localhost/db?socket=/nonexistent-ll-dir/x.sock",
    f"mysql://u:{SECRET}@h/db?bogus=1",
    f"mongodb://u:{SECRET}:x@localhost/",
    f"mongodb://u:{SECRET}@h@localhost/",
    f"sqlite://u:{SECRET}@/tmp/x.db",
    f"redis://u:{SECRET}@h/",
]


def _surfaced(e):
    return " ".join([str(e), repr(e), repr(e.args), str(getattr(e, "__cause__", ""))])


@pytest.mark.parametrize("uri", URIS)
def test_no_password_in_errors(uri):
    with pytest.raises(CLEAR) as info:
        leaselock.Client(uri, label="x")
    assert SECRET not in _surfaced(info.value)
    with pytest.raises(CLEAR) as info:
        leaselock.connect(uri)
    assert SECRET not in _surfaced(info.value)


url_text = st.lists(st.sampled_from(list("ab:@/?#&=%7\\") + ["password=", "%40"]),
                    max_size=20).map("".join)


@FAST
@given(rest=url_text, scheme=st.sampled_from(["postgresql", "mysql", "mongodb", "sqlite", "x"]))
def test_uri_errors_hide_the_password(rest, scheme):
    uri = f"{scheme}://u:{SECRET}@{rest}"
    # Only URIs that fail before reaching a server: PostgreSQL and MySQL
    # are sent to a socket in a missing directory, MongoDB only with a
    # second '@' (refused), SQLite refuses credentials, x:// is unknown.
    if scheme == "postgresql":
        uri += ("&" if "?" in uri else "?") + "host=/nonexistent-ll-dir"
    elif scheme == "mysql":
        uri += ("&" if "?" in uri else "?") + "socket=/nonexistent-ll-dir/x.sock"
    elif scheme == "mongodb" and "@" not in rest.split("/")[0]:
        return
    try:
        c = leaselock.Client(uri)
    except CLEAR as e:
        assert SECRET not in _surfaced(e)
        return
    try:
        assert SECRET not in repr(c)
    finally:
        c.close()


