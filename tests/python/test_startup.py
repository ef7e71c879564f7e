"""What `import leaselock` loads: asyncio, concurrent.futures and logging
are imported when first needed, not by the import (they were most of its
start-up), and everything behaves as if they had been. Each case runs in
a fresh interpreter: this one has imported them all long ago."""
import subprocess
import sys
import textwrap

LAZY = ("asyncio", "concurrent.futures", "logging")


def run(code, *args):
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p


def test_the_default_path_imports_none_of_them(sqlite_uri, key):
    # Importing, a with-block, a timed acquire and a decorated function:
    # none of them needs asyncio or logging.
    p = run(f"""
        import sys
        before = set(sys.modules)
        import leaselock
        client = leaselock.connect(sys.argv[1])
        lock = client.lock(sys.argv[2])
        with lock:
            pass
        with lock.acquire(timeout=1):
            pass

        @client.locked(sys.argv[2])
        def job():
            return 1

        assert job() == 1
        client.close()
        print(sorted(m for m in {LAZY!r} if m in set(sys.modules) - before))
    """, sqlite_uri, key)
    assert p.stdout.strip() == "[]"


def test_the_first_event_goes_where_logging_sends_it(sqlite_uri, key):
    # Logging never imported, so never configured: the first event imports
    # it, and a WARNING goes to its last-resort handler (stderr) as it did
    # when the import loaded logging; DEBUG events stay below the level.
    p = run("""
        import sys
        import leaselock
        a, b = leaselock.connect(sys.argv[1]), leaselock.connect(sys.argv[1])
        lease = a.lock(sys.argv[2]).acquire(timeout=0)
        print("logging" in sys.modules)
        b.force_release(sys.argv[2])
        try:
            lease.release()
        except leaselock.NotHeld:
            print("not held")
        print("logging" in sys.modules)
    """, sqlite_uri, key)
    assert p.stdout.split() == ["False", "not", "held", "True"]
    assert f'release_failed "{key}" (fence 1): release failed' in p.stderr
    assert "acquired for" not in p.stderr


def test_logging_configured_after_the_import_is_followed(sqlite_uri, key):
    p = run("""
        import sys
        import leaselock
        client = leaselock.connect(sys.argv[1])
        import logging
        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(event)s")
        with client.lock(sys.argv[2]):
            pass
    """, sqlite_uri, key)
    assert p.stderr.split() == ["DEBUG", "acquire", "DEBUG", "release"]


def test_a_task_is_told_from_a_thread_with_asyncio_imported_later(sqlite_uri, key):
    # asyncio imported after leaselock: the holder is still the task.
    p = run("""
        import sys
        import leaselock
        import asyncio

        async def main():
            client = leaselock.connect(sys.argv[1])
            lock = client.lock(sys.argv[2])
            async with lock:
                try:
                    await lock.acquire_async(timeout=0)
                except RuntimeError as e:
                    print(e)
            client.close()

        asyncio.run(main())
    """, sqlite_uri, key)
    assert "is already held by this task through this Lock" in p.stdout
