"""A forked child never releases (or renews) its parent's leases."""
import multiprocessing
import os
import sys

import leaselock


def _child_exit(code):
    sys.stdout.flush()
    os._exit(code)


def _wait(pid):
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_fork_child_does_not_touch_parent_lease(client, key):
    lock = client.lock(key, ttl=10)
    with lock as lease:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                if lease.held or lease.lost or lease.expires_in != 0.0:
                    code = 10
                elif "parent process" not in repr(lease):
                    code = 11
                else:
                    try:
                        lease.release()
                        code = 12
                    except leaselock.NotHeld:
                        pass
                    try:
                        lease.renew()
                        code = 13
                    except leaselock.NotHeld:
                        pass
                    # Leaving a with-block in the child is silent and
                    # leaves the parent's lease alone.
                    with lease:
                        pass
                    # The child's Lock forgot what the parent's thread held
                    # and the child is another owner.
                    if lock.try_acquire() is not None:
                        code = 14
                    # The inherited client works for the child's own keys.
                    with client.lock(key + "/child") as mine:
                        if not mine.held:
                            code = 15
                    del lease
                    client.close()  # releases nothing of the parent's
            except BaseException:
                code = 20
            _child_exit(code)
        assert _wait(pid) == 0
        assert lease.held
        rec = client.info(key)
        assert rec["owner"] == lease.owner
        lease.renew()
    assert client.info(key)["owner"] is None


def test_fork_child_with_block_is_on_its_own_stack(client, key):
    # The parent's with-blocks came first (a Lock keeps the last thread's
    # stack at hand): the child's with-block is on the child's stack, where
    # lock.release() finds it, not on what it inherited of the parent's.
    lock = client.lock(key, ttl=10)
    for _ in range(2):
        with lock:
            pass
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            with lock:
                lock.release()
                if client.info(key)["owner"] is not None:
                    code = 10
        except BaseException:
            code = 20
        _child_exit(code)
    assert _wait(pid) == 0
    with lock:
        lock.release()


def test_fork_child_holds_are_in_its_own_registry(client, key):
    # The parent's with-blocks came first (a Lock keeps the thread's holds
    # registry at hand, and here the parent's registry outlives the child's
    # reset): the child's with-block is noted in the child's registry, so
    # another Lock of the client is told the child holds the key.
    lock = client.lock(key, ttl=10)
    for _ in range(2):
        with lock:
            pass
    kept = leaselock._leaselock._thread_holds()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            with lock:
                try:
                    client.lock(key).acquire(timeout=0)
                    code = 10
                except RuntimeError:  # held by this thread through another Lock
                    pass
                except leaselock.LockTimeout:
                    code = 11
        except BaseException:
            code = 20
        _child_exit(code)
    assert _wait(pid) == 0
    assert kept is not None


def _mp_child(lease_owner, uri, key, q):
    # Runs in a multiprocessing child: the inherited globals include the
    # parent's client and lease when forked.
    with leaselock.connect(uri) as c:
        rec = c.info(key)
        q.put(rec["owner"] == lease_owner)


def test_multiprocessing_fork_child_leaves_lease(client, uri, key):
    lease = client.lock(key, ttl=10).acquire()
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_mp_child, args=(lease.owner, uri, key, q))
    p.start()
    p.join(60)
    assert p.exitcode == 0 and q.get(timeout=5) is True
    # The child exited (running its atexit hooks, which close its clients)
    # and the lease is still the parent's.
    assert client.info(key)["owner"] == lease.owner and lease.held
    lease.release()


CHILD_EXIT_SCRIPT = r"""
import os, sys, warnings, leaselock
# Python 3.12+ warns about fork() in a process with threads (the renewal
# thread): expected here, and not what this test looks for on stderr.
warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
c = leaselock.connect(sys.argv[1])
lost = []
lease = c.lock(sys.argv[2], ttl=0.5, on_lost=lost.append).acquire()
pid = os.fork()
if pid == 0:
    # A normal interpreter exit in the child, with the parent's client,
    # lease and renewal callback inherited: atexit closes the client.
    sys.exit(0 if not lease.held else 3)
_, st = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(st) == 0, st
assert lease.held and c.info(sys.argv[2])["owner"] == lease.owner
print("parent ok", flush=True)
# And the parent exits with the lease held: atexit releases it.
"""


def test_fork_child_exits_normally(uri, key, tmp_path):
    import subprocess

    script = tmp_path / "child_exit.py"
    script.write_text(CHILD_EXIT_SCRIPT)
    r = subprocess.run([sys.executable, str(script), uri, key], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "parent ok"
    assert r.stderr == ""
    with leaselock.connect(uri) as c:
        assert c.info(key)["owner"] is None  # released at the parent's exit
