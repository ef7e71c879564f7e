"""Bad input: a clear exception naming the argument, never a crash."""
import math

import pytest

import leaselock

SQLITE_ONLY = "sqlite"


@pytest.fixture
def c(sqlite_uri):
    with leaselock.connect(sqlite_uri) as client:
        yield client


# (description, callable taking the client, exception type, message substring)
CASES = [
    ("key int", lambda c: c.lock(42), TypeError, "key must be a str"),
    ("key bytes", lambda c: c.lock(b"k"), TypeError, "key must be a str"),
    ("key None", lambda c: c.lock(None), TypeError, "key must be a str"),
    ("key empty", lambda c: c.lock(""), ValueError, "key must not be empty"),
    ("key 256 bytes", lambda c: c.lock("k" * 256), ValueError, "at most 255"),
    ("key 128 two-byte chars", lambda c: c.lock("é" * 128), ValueError, "at most 255"),
    ("key NUL", lambda c: c.lock("a\0b"), ValueError, "NUL"),
    ("key lone surrogate", lambda c: c.lock("a\udc80"), ValueError, "UTF-8"),
    ("ttl zero", lambda c: c.lock("k", ttl=0), ValueError, "ttl must be greater than 0"),
    ("ttl negative", lambda c: c.lock("k", ttl=-1), ValueError, "ttl must not be negative"),
    ("ttl below 1 ms", lambda c: c.lock("k", ttl=0.0005), ValueError,
     "ttl must be at least 0.001 s (1 ms)"),
    ("ttl tiny", lambda c: c.lock("k", ttl=1e-300), ValueError, "ttl must be at least 0.001 s"),
    ("ttl NaN", lambda c: c.lock("k", ttl=math.nan), ValueError, "ttl must be a number"),
    ("ttl inf", lambda c: c.lock("k", ttl=math.inf), ValueError, "ttl must be at most 30 days"),
    ("ttl too long", lambda c: c.lock("k", ttl=31 * 86400), ValueError, "at most 30 days"),
    ("ttl huge int", lambda c: c.lock("k", ttl=10**400), ValueError, "at most 30 days"),
    ("ttl huge negative int", lambda c: c.lock("k", ttl=-10**400), ValueError,
     "ttl must not be negative"),
    ("ttl str", lambda c: c.lock("k", ttl="30s"), TypeError, "ttl must be a number"),
    ("ttl bool", lambda c: c.lock("k", ttl=True), TypeError, "ttl must be a number"),
    ("ttl None", lambda c: c.lock("k", ttl=None), TypeError, "ttl must be a number"),
    ("min_hold negative", lambda c: c.lock("k", min_hold=-0.5), ValueError, "min_hold"),
    ("min_hold NaN", lambda c: c.lock("k", min_hold=math.nan), ValueError, "min_hold"),
    ("auto_renew str", lambda c: c.lock("k", auto_renew="yes"), TypeError, "auto_renew"),
    ("on_lost not callable", lambda c: c.lock("k", on_lost=3), TypeError, "on_lost"),
    ("on_lost without auto_renew", lambda c: c.lock("k", auto_renew=False, on_lost=print),
     ValueError, "on_lost needs auto_renew=True"),
    ("timeout negative", lambda c: c.lock("k").acquire(timeout=-1), ValueError, "timeout"),
    ("timeout NaN", lambda c: c.lock("k").acquire(timeout=math.nan), ValueError, "timeout"),
    ("timeout str", lambda c: c.lock("k").acquire(timeout="5"), TypeError, "timeout"),
    ("renew ttl zero", lambda c: c.lock("r").acquire().renew(ttl=0), ValueError, "ttl"),
    ("renew ttl NaN", lambda c: c.lock("r2").acquire().renew(ttl=math.nan), ValueError, "ttl"),
    ("renew ttl below 1 ms", lambda c: c.lock("r3").acquire().renew(ttl=0.0009), ValueError,
     "ttl must be at least 0.001 s"),
    ("info int key", lambda c: c.info(1), TypeError, "key must be a str"),
    ("force_release lone surrogate", lambda c: c.force_release("\udc80"), ValueError, "UTF-8"),
    ("info empty key", lambda c: c.info(""), ValueError, "key must not be empty"),
    ("locks prefix int", lambda c: c.locks(prefix=5), TypeError, "prefix must be a str"),
    ("locks prefix too long", lambda c: c.locks("p" * 300), ValueError, "prefix"),
    ("force_release NUL", lambda c: c.force_release("a\0"), ValueError, "NUL"),
    ("force_release None", lambda c: c.force_release(None), TypeError, "key must be a str"),
    ("decorator timeout NaN", lambda c: c.locked("k", timeout=math.nan), ValueError, "timeout"),
    ("decorator key int", lambda c: c.locked(7), TypeError, "key must be a str"),
    ("decorator raise_on_busy str", lambda c: c.locked("k", raise_on_busy="y"), TypeError,
     "raise_on_busy"),
    ("decorator non-callable", lambda c: c.locked("k")(5), TypeError, "callable"),
    ("Lease created directly", lambda c: leaselock.Lease(), TypeError, "cannot create"),
    ("Lock on a non-client", lambda c: leaselock.Lock("not a client", "k"), TypeError,
     "client must be a leaselock.Client"),
    ("Lock on a closed client", lambda c: (c.close(), leaselock.Lock(c, "k")), ValueError,
     "closed client"),
    ("Client __init__ twice", lambda c: leaselock.Client.__init__(c, None), TypeError,
     "only once"),
]


@pytest.mark.parametrize("what,fn,exc,msg", CASES, ids=[c[0] for c in CASES])
def test_bad_argument(c, what, fn, exc, msg):
    with pytest.raises(exc) as e:
        fn(c)
    assert msg in str(e.value)
    assert getattr(e.value, "code", None) == "INVALID"


def test_signature_errors_are_plain_type_errors(c, sqlite_uri):
    # Raised by the interpreter before leaselock runs: no .code.
    with pytest.raises(TypeError, match="tll"):
        c.lock("k", tll=3)
    with pytest.raises(TypeError, match="colour"):
        leaselock.connect(sqlite_uri, colour="red")


URI_CASES = [
    ("uri int", 5, TypeError, "uri must be a str"),
    ("uri bytes", b"sqlite:///x", TypeError, "uri must be a str"),
    ("uri empty", "", ValueError, "uri must not be empty"),
    ("uri NUL", "sqlite:///tmp/a\0b", ValueError, "NUL"),
    ("uri lone surrogate", "sqlite:///tmp/\udc80.db", ValueError, "uri must be valid UTF-8"),
    ("uri no scheme", "not a uri", ValueError, "malformed URI"),
    ("uri unknown scheme", "redis://localhost/", ValueError, "unknown URI scheme"),
    ("uri relative sqlite", "sqlite://relative/path.db", ValueError, "sqlite"),
    ("uri unreachable mysql", "mysql://u:p@127.0.0.1:1/db", leaselock.BackendError, ""),
]


@pytest.mark.parametrize("what,uri,exc,msg", URI_CASES, ids=[c[0] for c in URI_CASES])
def test_bad_uri(what, uri, exc, msg):
    with pytest.raises(exc) as e:
        leaselock.connect(uri)
    assert msg in str(e.value)
    assert e.value.code == ("BACKEND" if exc is leaselock.BackendError else "INVALID")


def test_bad_connect_options(sqlite_uri):
    with pytest.raises(TypeError, match="label must be a str") as e:
        leaselock.connect(sqlite_uri, label=3)
    assert e.value.code == "INVALID"
    with pytest.raises(ValueError) as e:
        leaselock.connect(sqlite_uri, label="x" * 300)
    assert str(e.value) == "label is 300 bytes long in UTF-8 (at most 255)"
    assert e.value.code == "INVALID"
    with pytest.raises(ValueError) as e:
        leaselock.connect(sqlite_uri, label="a\0b")
    assert str(e.value) == "label must not contain a NUL character"
    assert e.value.code == "INVALID"
    with pytest.raises(ValueError, match="label must be valid UTF-8") as e:
        leaselock.connect(sqlite_uri, label="\udc80")
    assert e.value.code == "INVALID"
    with leaselock.connect(sqlite_uri, label="é" * 127) as c:  # 254 bytes
        assert c.label == "é" * 127


def test_codes_on_value_errors(c):
    with pytest.raises(ValueError) as e:
        c.lock("")
    assert e.value.code == "INVALID"
    with pytest.raises(ValueError) as e:
        leaselock.connect("redis://x/")
    assert e.value.code == "INVALID"


def test_durations_at_the_edges(c):
    # 1 ms is the shortest TTL; shorter min_hold and timeout round up to
    # 1 ms, and timeout=0 stays one try.
    assert c.lock("k", ttl=0.001).ttl == 0.001
    assert c.lock("k", min_hold=0.0004).min_hold == 0.001
    lease = c.lock("edge").acquire(timeout=0.0004)
    assert lease.held
    lease.release()
    held = c.lock("edge").acquire(timeout=0)
    with leaselock.connect(c.uri) as other:  # another owner
        assert other.lock("edge").try_acquire() is None
    held.release()
