"""Write throughput of verdict rows through the batching store writer, and the cost of audit before release,
on SQLite and (when configured) Postgres.

    python bench/store_bench.py [--rows N] [--releases N] [--levels 1,6,32] [--gap-ms 20]
                                [--pg postgresql://user:pass@host/db]

Audit before release: at each concurrency level, that many requests in a loop each queue what a released call
writes (its request's journal entry, the call row, a reason row) and wait for the commit, as the release point
of enforce mode does; printed are the wait's p50/p99 (what each answer carrying a call is delayed) and the calls
released per second (the writer's group commit shares one transaction among the requests waiting together).
Each level runs twice, interleaved: `inline`, the rollups committed in the verdict's transaction (as before
issue 27), and `after`, the writer as it is (rows and marker first, waiters released, rollups in the next
transaction); the last column is after/inline (the machine is shared: compare ratios).

The Postgres URL may also come from ALLOWLIST_PROXY_TEST_PG; the bench writes into a fresh database
it creates and drops. Rows are what one judged call writes: a tool_calls row and one reason row (and, in the
release runs, the request's final row once its call is released, as the recorder queues it at the answer's end).
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
from proxy.store.writer import StoreWriter, insert_rows


class InlineRollups(StoreWriter):
    """The writer before issue 27: a batch's rollups in the transaction that releases its waiters."""

    async def _write(self, batch) -> None:  # type: ignore[no-untyped-def]
        grouped: dict[str, list[dict]] = {}
        for item in batch:
            grouped.setdefault(item.table.name, []).append(item.row)
        async with self._engine.begin() as conn:
            await insert_rows(conn, grouped)
        self.rows_written += len(batch)
        for item in batch:
            if item.waiter is not None and not item.waiter.done():
                item.waiter.set_result(None)


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


def _request(call: dict) -> dict:
    return {"id": call["request_id"], "session_id": call["session_id"], "model": call["model"], "route": "chat",
            "upstream": "http://127.0.0.1:8000", "stream": True, "started_at": call["created_at"] - 1.0,
            "ttfb_ms": 80.0, "ttft_ms": 95.0, "duration_ms": 1000.0, "status": 200, "outcome": "ok",
            "prompt_tokens": 20_000, "completion_tokens": 300, "concurrency": 1, "attempts": 1,
            "budget_exhausted": False, "policy_name": call["policy_name"], "policy_hash": call["policy_hash"],
            "mode": "enforce"}


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


async def releases(url: str, concurrency: int, total: int, writer_class: type[StoreWriter] = StoreWriter,
                   gap: float = 0.0) -> tuple[float, float, float]:
    engine = create_engine(url)
    await migrate(engine)
    writer = writer_class(engine)
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
            # The request's final row replaces its journal entry when its answer ends, nobody waiting for it.
            writer.put(tables.requests, _request(row))
            await asyncio.sleep(gap)  # the model's next turn: an agent's next call never follows at once

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


def _print_releases(name: str, url: str, levels: list[int], total: int, gap: float, rounds: int = 2) -> None:
    print(f"{name:<9} release wait      {'inline p50':>10} {'p99':>7} {'calls/s':>8} | {'after p50':>9} {'p99':>7} "
          f"{'calls/s':>8} | after/inline p50 p99")
    for concurrency in levels:
        found: dict[str, list[tuple[float, float, float]]] = {"inline": [], "after": []}
        for _ in range(rounds):  # interleaved, so both see the same load
            found["inline"].append(asyncio.run(releases(url, concurrency, total, InlineRollups, gap)))
            found["after"].append(asyncio.run(releases(url, concurrency, total, gap=gap)))
        inline, after = (tuple(statistics.median(x) for x in zip(*found[k], strict=True)) for k in ("inline", "after"))
        ratios = f"{after[0] / inline[0]:5.2f}x {after[1] / inline[1]:5.2f}x"
        print(f"{name:<9} c={concurrency:<3}           {inline[0]:7.2f} ms {inline[1]:7.2f} {inline[2]:8,.0f} | "
              f"{after[0]:6.2f} ms {after[1]:7.2f} {after[2]:8,.0f} | {ratios}")


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
    parser.add_argument("--gap-ms", type=float, default=20.0, help="pause between one request's end and its "
                        "session's next call (0: back to back, the writer's throughput)")
    parser.add_argument("--pg", default=os.environ.get("ALLOWLIST_PROXY_TEST_PG", ""))
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    gap = args.gap_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        rate = asyncio.run(run(f"sqlite:///{Path(tmp) / 'bench.db'}", args.rows))
        print(f"sqlite    {args.rows} judged calls: {rate:,.0f} calls/s ({2 * rate:,.0f} rows/s)")
        _print_releases("sqlite", f"sqlite:///{Path(tmp) / 'release.db'}", levels, args.releases, gap)
    if not args.pg:
        print("postgres  not configured (--pg URL or ALLOWLIST_PROXY_TEST_PG): skipped")
        return
    name = f"bench_{uuid.uuid4().hex[:8]}"
    asyncio.run(_pg_database(args.pg, True, name))
    try:
        url = args.pg.rsplit("/", 1)[0] + "/" + name
        rate = asyncio.run(run(url, args.rows))
        print(f"postgres  {args.rows} judged calls: {rate:,.0f} calls/s ({2 * rate:,.0f} rows/s)")
        _print_releases("postgres", url, levels, args.releases, gap)
    finally:
        asyncio.run(_pg_database(args.pg, False, name))


if __name__ == "__main__":
    main()
