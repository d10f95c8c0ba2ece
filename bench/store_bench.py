"""Write throughput of verdict rows through the batching store writer, and the cost of audit before release,
on SQLite and (when configured) Postgres.

    python bench/store_bench.py [--rows N] [--releases N] [--levels 1,6,32] [--pg postgresql://user:pass@host/db]

Audit before release: at each concurrency level, that many requests in a loop each queue what a released call
writes (its request's journal entry, the call row, a reason row) and wait for the commit, as the release point
of enforce mode does; printed are the wait's p50/p99 (what each answer carrying a call is delayed) and the calls
released per second (the writer's group commit shares one transaction among the requests waiting together).

The Postgres URL may also come from ALLOWLIST_PROXY_TEST_PG; the bench writes into a fresh database
it creates and drops. Rows are what one judged call writes: a tool_calls row and one reason row.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from proxy.store import tables
from proxy.store.db import create_engine, migrate
from proxy.store.writer import StoreWriter


def _call(i: int) -> tuple[dict, dict]:
    call_id = uuid.uuid4().hex
    now = time.time()
    row = {"id": call_id, "request_id": uuid.uuid4().hex, "session_id": f"ses_{i % 500}", "model": "qwen3.5-27b",
           "route": "chat", "attempt": 1, "call_index": 0, "created_at": now, "tool_name": "bash",
           "source": "openai", "arguments_raw": '{"command": "uv run scripts/search.py x | head -5"}',
           "arguments_json": '{"command": "uv run scripts/search.py x | head -5"}',
           "command": "uv run scripts/search.py x | head -5", "decision": "reject", "primary_reason": "pipe",
           "reasons": "pipe", "shape": "pipe", "policy_name": "strict-uv-scripts", "policy_hash": "0" * 16,
           "mode": "enforce", "delivered": False}
    reason = {"tool_call_id": call_id, "position": 0, "reason": "pipe", "model": "qwen3.5-27b", "created_at": now}
    return row, reason


async def run(url: str, rows: int) -> float:
    engine = create_engine(url)
    await migrate(engine)
    writer = StoreWriter(engine)
    await writer.start()
    start = time.perf_counter()
    for i in range(rows):
        row, reason = _call(i)
        writer.put(tables.tool_calls, row)
        writer.put(tables.tool_call_reasons, reason)
        if i % 1000 == 999:
            await asyncio.sleep(0)  # the request path yields like this between requests
    await writer.flush(600)
    elapsed = time.perf_counter() - start
    await writer.stop()
    await engine.dispose()
    return rows / elapsed


async def releases(url: str, concurrency: int, total: int) -> tuple[float, float, float]:
    engine = create_engine(url)
    await migrate(engine)
    writer = StoreWriter(engine)
    await writer.start()
    waits: list[float] = []
    remaining = [total]

    async def worker() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            row, reason = _call(len(waits))
            row.update(decision="allow", primary_reason=None, reasons="", shape=None, delivered=True)
            journal = {"id": row["request_id"], "owner": writer.owner, "created_at": time.time(), "row": "{}"}
            started = time.perf_counter()
            writer.put_many([(tables.request_journal, journal), (tables.tool_calls, row),
                             (tables.tool_call_reasons, reason)])
            await writer.commit(30)
            waits.append(time.perf_counter() - started)

    remaining[0] = 2
    await worker()  # warm the connection and the tables first
    remaining[0] = total
    waits.clear()
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    await writer.stop()
    await engine.dispose()
    ordered = sorted(waits)
    return (statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
            len(waits) / elapsed)


def _print_releases(name: str, url: str, levels: list[int], total: int) -> None:
    for concurrency in levels:
        p50, p99, rate = asyncio.run(releases(url, concurrency, total))
        print(f"{name:<9} audit before release c={concurrency:<3} added p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  "
              f"{rate:8,.0f} calls/s")


async def _pg_database(admin: str, create: bool, name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"' if create else f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--releases", type=int, default=2000)
    parser.add_argument("--levels", default="1,6,32")
    parser.add_argument("--pg", default=os.environ.get("ALLOWLIST_PROXY_TEST_PG", ""))
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        rate = asyncio.run(run(f"sqlite:///{Path(tmp) / 'bench.db'}", args.rows))
        print(f"sqlite    {args.rows} judged calls: {rate:,.0f} calls/s ({2 * rate:,.0f} rows/s)")
        _print_releases("sqlite", f"sqlite:///{Path(tmp) / 'release.db'}", levels, args.releases)
    if not args.pg:
        print("postgres  not configured (--pg URL or ALLOWLIST_PROXY_TEST_PG): skipped")
        return
    name = f"bench_{uuid.uuid4().hex[:8]}"
    asyncio.run(_pg_database(args.pg, True, name))
    try:
        url = args.pg.rsplit("/", 1)[0] + "/" + name
        rate = asyncio.run(run(url, args.rows))
        print(f"postgres  {args.rows} judged calls: {rate:,.0f} calls/s ({2 * rate:,.0f} rows/s)")
        _print_releases("postgres", url, levels, args.releases)
    finally:
        asyncio.run(_pg_database(args.pg, False, name))


if __name__ == "__main__":
    main()
