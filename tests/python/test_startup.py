"""What `import leaselock` loads: asyncio, concurrent.futures and logging
are imported when first needed, not by the import (they were most of its
start-up), and everything behaves as if they had been. Each case runs in
a fresh interpreter: this one has imported them all long ago."""
import subprocess
import sys
import textwrap

LAZY = ("asyncio", "concurrent.futures", "logging")


def run(code, *args, flags=()):
    p = subprocess.run([sys.executable, *flags, "-c", textwrap.dedent(code), *map(str, args)],
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
    # The with-blocks before the import find logging missing (and keep
    # that while sys.modules is unchanged): those after it follow it.
    p = run("""
        import sys
        import leaselock
        client = leaselock.connect(sys.argv[1])
        for _ in range(3):
            with client.lock(sys.argv[2]):
                pass
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


def test_a_with_block_in_a_task_is_the_tasks_with_asyncio_imported_later(sqlite_uri, key):
    # A thread's with-blocks first (asyncio missing, which the with-block
    # keeps while sys.modules is unchanged), then asyncio: a with-block in a
    # task is the task's, so that another task of the thread is not told it
    # holds the key (it finds it busy).
    p = run("""
        import sys
        import leaselock
        client = leaselock.connect(sys.argv[1])
        lock = client.lock(sys.argv[2])
        for _ in range(3):
            with lock:
                pass
        import asyncio

        async def main():
            inside = asyncio.Event()
            done = asyncio.Event()

            async def holder():
                with lock:
                    inside.set()
                    await done.wait()

            task = asyncio.create_task(holder())
            await inside.wait()
            print(lock.try_acquire())
            done.set()
            await task

        asyncio.run(main())
        with lock:
            print("thread")
        client.close()
    """, sqlite_uri, key)
    assert p.stdout.split() == ["None", "thread"]


def test_the_import_imports_no_typing_datetime_random_asyncio_logging():
    # typing (with re, enum and contextlib), datetime and random were most
    # of what `import leaselock` cost once asyncio and logging were lazy.
    # -S: no site, whose .pth files (certifi's) may import typing first.
    p = run("""
        import leaselock, sys
        print(sorted(m for m in ('typing', 'datetime', 'random', 'asyncio', 'logging')
                     if m in sys.modules))
    """, flags=["-S"])
    assert p.stdout.strip() == "[]"


def test_what_they_served_still_works_imported_late(sqlite_uri, key):
    # A fresh interpreter: datetime's C API is first needed by a timedelta
    # passed to the extension, the records' TypedDicts and the overloads'
    # typing when first named, random by a mode's asyncio wait.
    p = run("""
        import sys
        import leaselock
        from datetime import timedelta
        client = leaselock.connect(sys.argv[1])
        lock = client.lock(sys.argv[2], ttl=timedelta(seconds=5), min_hold=timedelta(0))
        with lock as lease:  # the extension's with-block reads ttl
            assert 0 < lease.expires_in <= 5
            lease.renew(timedelta(seconds=7))
            assert 5 < lease.expires_in <= 7
        with lock.acquire(timeout=timedelta(seconds=1)) as lease:
            holder = client.info(sys.argv[2])["holder"]
        print(repr(holder)[:12], holder.label, type(holder) is leaselock.Holder)
        try:
            client.lock(sys.argv[2], ttl="5")
        except TypeError as e:
            print(e.code)
        print("typing" in sys.modules)
        import typing
        print(typing.is_typeddict(leaselock.Record), typing.is_typeddict(leaselock.LockInfo),
              typing.is_typeddict(leaselock.Durability), leaselock.Record.__module__,
              sorted(typing.get_type_hints(leaselock.Holder)))
        import asyncio

        async def main():
            sem = client.semaphore(sys.argv[2] + "s", 1)
            held = await sem.acquire_async(timeout=0)
            try:
                await sem.acquire_async(timeout=0.05)
            except leaselock.LockTimeout:
                print("random" in sys.modules)
            held.release()

        asyncio.run(main())
        client.close()
    """, sqlite_uri, key, flags=["-S"])
    assert p.stdout.split() == ["Holder(host=", "None", "True", "INVALID", "False",
                                "True", "True", "True", "leaselock", "['host',", "'label',",
                                "'pid']", "True"]
