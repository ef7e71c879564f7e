"""leaselock with types (mypy --strict checks this file in `make test`).

Durations as datetime.timedelta, a decorated job whose result is Optional
(None: skipped because another run held the lock), the same with
raise_on_busy=True (the plain result, or LockTimeout), asyncio tasks taking
turns, and the typed records of info() and locks().

    PYTHONPATH=build/python/lib python3 examples/python_typed.py [URI]
"""
import asyncio
import sys
from datetime import timedelta
from typing import Optional

import leaselock


def main(uri: Optional[str] = None) -> None:
    with leaselock.connect(uri, label="typed example") as client:
        @client.locked("example/report", ttl=timedelta(minutes=5), timeout=timedelta(seconds=2))
        def report(day: str) -> int:
            return len(day)

        rows: Optional[int] = report("2026-11-23")  # None when another run held it
        print(f"report: {'skipped (busy)' if rows is None else rows}")

        @client.locked("example/report", raise_on_busy=True)
        def strict_report(day: str) -> int:
            return len(day)

        n: int = strict_report("2026-11-24")  # or LockTimeout when busy
        print(f"strict report: {n}")

        @client.locked("example/feed", timeout=1.5)
        async def refresh_feed(url: str) -> str:
            await asyncio.sleep(0.01)
            return f"refreshed {url}"

        async def turns() -> list[int]:
            lock = client.lock("example/turns", ttl=timedelta(seconds=30))
            fences: list[int] = []

            async def worker() -> None:
                async with lock as lease:  # waits on the event loop, no thread each
                    fences.append(lease.fence)
                    await asyncio.sleep(0.01)

            await asyncio.gather(*(worker() for _ in range(5)))
            feed: Optional[str] = await refresh_feed("https://example.org/feed")
            print(f"feed: {feed}")
            return fences

        print(f"five tasks took turns, fences {asyncio.run(turns())}")

        rec: Optional[leaselock.Record] = client.info("example/turns")
        if rec is not None:
            print(f"example/turns: fence {rec['fence']}, owner {rec['owner']}")
        for r in client.locks("example/"):
            holder: leaselock.Holder = r["holder"]
            print(f"  {r['key']}: fence {r['fence']}, expires in {r['expires_in']:.1f} s, "
                  f"last holder {holder.label!r} (pid {holder.pid})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
