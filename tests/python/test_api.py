"""The package's public surface: its names, typed records, and decorated
functions that keep their signature."""
import asyncio
import inspect
import typing

import pytest

import leaselock

PUBLIC = {
    "connect", "Client", "Lock", "Lease", "Holder", "Record", "LockError", "LockTimeout",
    "NotHeld", "LockLost", "BackendError", "default_uri", "Semaphore", "RWLock", "RWLockSide",
    "Durability", "LockInfo",
}


def test_public_names():
    assert set(leaselock.__all__) == PUBLIC
    assert len(leaselock.__all__) == len(PUBLIC)
    public = {n for n in dir(leaselock) if not n.startswith("_")}
    assert public == PUBLIC, f"leaked: {sorted(public - PUBLIC)}"
    for name in ("os", "threading", "asyncio", "weakref", "functools", "inspect", "atexit",
                 "namedtuple", "Any", "Callable", "Optional", "annotations", "timedelta"):
        assert not hasattr(leaselock, name), name
    assert isinstance(leaselock.__version__, str)


def test_star_import_gives_the_public_names():
    ns = {}
    exec("from leaselock import *", ns)
    assert {n for n in ns if n != "__builtins__"} == PUBLIC


def test_public_classes_show_as_leaselock():
    for cls in (leaselock.Client, leaselock.Lock, leaselock.Holder, leaselock.Record,
                leaselock.Durability, leaselock.Semaphore, leaselock.RWLock,
                leaselock.RWLockSide):
        assert cls.__module__ == "leaselock", cls
    assert leaselock.Lease.__module__ == "leaselock"
    assert leaselock.LockTimeout.__module__ == "leaselock"


def test_records_are_typed_dicts(client, key):
    assert typing.is_typeddict(leaselock.Record)
    assert set(typing.get_type_hints(leaselock.Record)) == {
        "key", "owner", "fence", "expires_in", "holder", "holds", "held_for", "next_owner",
        "queued"}
    assert typing.is_typeddict(leaselock.LockInfo)
    assert set(typing.get_type_hints(leaselock.LockInfo)) - set(
        typing.get_type_hints(leaselock.Record)) == {
        "mode", "state", "live", "holders", "slots", "readers", "writer"}
    with client.lock(key) as lease:
        rec = client.info(key)
        assert type(rec) is dict  # dict-style access as before
        assert rec["key"] == key and rec["owner"] == lease.owner and rec["fence"] == lease.fence
        assert rec["holds"] == 1
        assert 0 < rec["expires_in"] <= 30
        holder = rec["holder"]
        assert isinstance(holder, leaselock.Holder) and isinstance(holder, tuple)
        assert holder.label == "pytest" and holder == (holder.host, holder.pid, "pytest")
        recs = client.locks(key)
        assert [r["key"] for r in recs] == [key] and type(recs[0]) is dict
        assert recs[0]["holder"] == holder
    assert client.info(key)["owner"] is None


def test_decorated_functions_keep_their_signature(client, key):
    def job(a: int, b: str = "x", *, c: float) -> str:
        """Doc."""
        return f"{a}{b}{c}"

    async def ajob(a: int, /, *rest: int) -> int:
        return a + sum(rest)

    for deco in (client.locked(key), client.locked(key, raise_on_busy=True)):
        wrapped = deco(job)
        assert inspect.signature(wrapped) == inspect.signature(job)
        assert wrapped.__name__ == "job" and wrapped.__doc__ == "Doc."
        assert wrapped.__wrapped__ is job
        assert wrapped(1, c=2.5) == "1x2.5"
        awrapped = deco(ajob)
        assert inspect.iscoroutinefunction(awrapped)
        assert inspect.signature(awrapped) == inspect.signature(ajob)
        assert asyncio.run(awrapped(1, 2, 3)) == 6


def test_a_locks_enter_and_exit_are_its_bound_methods(client, key):
    # The extension binds them from a free list of its own (bind.c): what
    # shows is still the lock's bound methods, and the class's methods.
    lock = client.lock(key)
    enter, exit_ = lock.__enter__, lock.__exit__
    assert (enter.__name__, exit_.__name__) == ("__enter__", "__exit__")
    assert enter.__self__ is lock and enter == lock.__enter__ and enter != exit_
    assert hash(enter) == hash(lock.__enter__)
    assert repr(enter).startswith("<built-in method __enter__ of Lock object")
    assert type(lock).__enter__ is leaselock._leaselock._LockBase.__dict__["__enter__"].__get__(
        None, leaselock._leaselock._LockBase)
    lease = enter()
    assert lease.held and exit_(None, None, None) is None and not lease.held
    lease = type(lock).__enter__(lock)
    assert lease.held
    type(lock).__exit__(lock, None, None, None)
    assert not lease.held
    with pytest.raises(TypeError):
        exit_(None, None)
    with pytest.raises(TypeError):
        leaselock._leaselock._LockBase.__dict__["__enter__"].__get__(object())
    # A subclass's own with-block on top of the lock's.
    seen = []

    class Traced(leaselock.Lock):
        def __enter__(self):
            seen.append("enter")
            return super().__enter__()

        def __exit__(self, *exc):
            seen.append("exit")
            return super().__exit__(*exc)

    with Traced(client, key) as lease:
        assert lease.held
    assert seen == ["enter", "exit"] and not lease.held
    # A lock no one else refers to lives until its with-block's exit.
    with client.lock(key) as lease:
        assert lease.held
    assert not lease.held
