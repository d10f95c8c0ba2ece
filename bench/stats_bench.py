"""How fast `/stats/models` answers over a large store.

Seeds a temporary SQLite store (made by the real migrations) with N tool calls (default 1,000,000), their
reason rows, requests and sessions, then times `proxy.stats.models.model_stats` over all of it (median of a few
runs) and each of its queries on its own, and prints the figures.

    python bench/stats_bench.py [--calls 1000000] [--runs 5] [--keep store.db]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from proxy.stats.models import model_stats
from proxy.store import figures, queries, rollups
from proxy.store.db import create_engine, migrate
from proxy.store.queries import Filters

MODELS = ("qwen3.5-9b", "qwen3.5-27b", "qwen3.6-35b-a3b")
ALLOWED = 'uv run scripts/search.py "rust async"'
# (command, decision, reasons, shape) of the rejections the traffic is made of.
ERRORS = (
    ("uv run scripts/search.py | head -{n}", "reject", ("pipe",), "pipe"),
    ("timeout {n} uv run scripts/search.py", "reject", ("wrapper",), "wrapper:timeout"),
    ("cd src && uv run scripts/search.py", "reject", ("cd", "chain"), "cd"),
    ("curl -s https://example.com/{n}", "reject", ("program",), "program:curl"),
    (None, "malformed", ("bad_arguments",), "bad_arguments"),
)
ERROR_RATE = 0.07
RETRY_SAME_SHAPE = 0.45  # after an error, the chance the next call retries the same blocked form
CALLS_PER_REQUEST = 4


def seed(path: Path, n_calls: int, *, rng: random.Random) -> dict[str, int]:
    """Insert the rows with executemany in large transactions; returns how many of each were written."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous=OFF")
    t0 = 1_800_000_000.0
    counts = {"sessions": 0, "requests": 0, "tool_calls": 0, "tool_call_reasons": 0}
    calls: list[tuple[Any, ...]] = []
    reasons: list[tuple[Any, ...]] = []
    reqs: list[tuple[Any, ...]] = []
    sessions: list[tuple[Any, ...]] = []
    now = t0

    def flush() -> None:
        conn.executemany("INSERT INTO sessions (id, source, model, created_at) VALUES (?,?,?,?)", sessions)
        conn.executemany("INSERT INTO requests (id, session_id, model, route, upstream, stream, started_at, "
                         "ttfb_ms, ttft_ms, duration_ms, status, outcome, prompt_tokens, completion_tokens, "
                         "concurrency, attempts, budget_exhausted, policy_name, mode) "
                         "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", reqs)
        conn.executemany("INSERT INTO tool_calls (id, request_id, session_id, model, route, attempt, call_index, "
                         "created_at, tool_name, source, arguments_raw, arguments_json, command, decision, "
                         "primary_reason, reasons, shape, policy_name, mode, delivered) "
                         "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", calls)
        conn.executemany("INSERT INTO tool_call_reasons VALUES (?,?,?,?,?)", reasons)
        conn.commit()
        for name, rows in (("sessions", sessions), ("requests", reqs), ("tool_calls", calls),
                           ("tool_call_reasons", reasons)):
            counts[name] += len(rows)
            rows.clear()

    # Ids grow with time, as OpenCode's `ses_...` ids and the store's own do in effect: the B-trees are
    # appended to instead of written all over, which keeps seeding a million rows to a minute or two.
    serial = 0

    def next_id() -> str:
        nonlocal serial
        serial += 1
        return f"{serial:016x}{rng.getrandbits(64):016x}"

    made = 0
    while made < n_calls:
        sid = f"ses_{next_id()[:24]}"
        model = rng.choice(MODELS)
        sessions.append((sid, "header", model, now))
        session_calls = min(rng.randint(5, 60), n_calls - made)
        last_error: tuple[Any, ...] | None = None
        request_id = ""
        for i in range(session_calls):
            now += 0.05
            if i % CALLS_PER_REQUEST == 0:
                request_id = next_id()
                attempts = 1 + (rng.random() < 0.2) + (rng.random() < 0.1)
                duration = rng.uniform(500, 20000)
                reqs.append((request_id, sid, model, "chat", "http://127.0.0.1:8000/v1", True, now,
                             rng.uniform(20, 400), rng.uniform(30, 500), duration, 200, "ok", 2000,
                             rng.randint(20, 800), rng.choice((1, 2, 4, 8)), attempts, False,
                             "strict-uv-scripts", "enforce"))
            if last_error is not None and rng.random() < RETRY_SAME_SHAPE:
                kind = last_error
            elif rng.random() < ERROR_RATE:
                kind = rng.choice(ERRORS)
            else:
                kind = None
            call_id = next_id()
            if kind is None:
                command, decision, codes, shape = ALLOWED, "allow", (), None
            else:
                template, decision, codes, shape = kind
                command = template.format(n=rng.randint(1, 3)) if template else None
            last_error = kind
            raw = '{"command": "uv run scr' if command is None else f'{{"command": "{command}"}}'
            calls.append((call_id, request_id, sid, model, "chat", 1, 0, now, "bash", "openai", raw,
                          None if command is None else raw, command, decision, codes[0] if codes else None,
                          ",".join(codes), shape, "strict-uv-scripts", "enforce", decision == "allow"))
            reasons.extend((call_id, pos, code, model, now) for pos, code in enumerate(codes))
            made += 1
        if len(calls) >= 200_000:
            flush()
    flush()
    conn.execute("ANALYZE")
    conn.commit()
    conn.close()
    return counts


async def timed(label: str, runs: int, make: Any) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        await make()
        times.append((time.perf_counter() - t) * 1000)
    median = statistics.median(times)
    print(f"  {label:<28} median {median:8.1f} ms   (runs: {', '.join(f'{x:.0f}' for x in times)})")
    return median


async def bench(path: Path, n_calls: int, runs: int) -> None:
    url = f"sqlite:///{path}"
    engine = create_engine(url)
    await migrate(engine)
    await engine.dispose()
    t = time.perf_counter()
    counts = seed(path, n_calls, rng=random.Random(7))
    print(f"seeded in {time.perf_counter() - t:.1f} s: " + ", ".join(f"{v:,} {k}" for k, v in counts.items()))

    engine = create_engine(url)
    try:
        # The rows went in behind the writer's back, so the rollups are built as the migration builds them
        # for a store that already holds rows.
        t = time.perf_counter()
        async with engine.begin() as conn:
            await conn.run_sync(rollups.rebuild)
        print(f"rollups built from the rows in {time.perf_counter() - t:.1f} s")
        print(f"store file: {path.stat().st_size / 1e6:.0f} MB")
        stats = await model_stats(engine)  # warms the page cache, as a running proxy's would be
        for m in stats["models"]:
            print(f"  {m['model']}: {m['tool_calls']:,} calls, {m['errors']:,} errors, "
                  f"{m['loops']['count']:,} loops (longest {m['loops']['max_attempts']}), "
                  f"recovery {m['recovery_rate']:.3f}, median attempts {m['median_attempts']}")
        print(f"model_stats over {counts['tool_calls']:,} tool calls:")
        total = await timed("model_stats (all)", runs, lambda: model_stats(engine))
        f = Filters()
        parts = {
            "call_counts": lambda c: figures.call_counts(c, f),
            "primary_reason_counts": lambda c: figures.primary_reason_counts(c, f),
            "request_counts": lambda c: figures.request_counts(c, f),
            "reason_counts": lambda c: figures.reason_counts(c, f),
            "sequence_stats (loops)": lambda c: figures.sequence_stats(c, f, 3),
            "attempt_histograms": lambda c: figures.attempt_histograms(c, f),
            "throughput_by_concurrency": lambda c: figures.throughput_by_concurrency(c, f),
            "latency_bins": lambda c: figures.latency_bins(c, f),
            "rows only (no rollups)": lambda c: queries.call_counts_from_rows(c, f),
        }
        for label, query in parts.items():
            async def one(query: Any = query) -> None:
                async with engine.connect() as conn:
                    await query(conn)
            await timed(label, runs, one)
        day = 1_800_000_000.0 + 3600
        await timed("model_stats (1 hour window)", runs, lambda: model_stats(engine, since=day, until=day + 3600))
        # Unaligned ends: two partial hours come from the rows.
        await timed("model_stats (2.5 h, unaligned)", runs,
                    lambda: model_stats(engine, since=day + 1800, until=day + 3 * 3600))
        print(f"target: under 200 ms for model_stats (all): {'met' if total < 200 else 'NOT met'} ({total:.0f} ms)")
    finally:
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="build the store at this path and keep it")
    args = parser.parse_args()
    if args.keep:
        asyncio.run(bench(args.keep, args.calls, args.runs))
        return
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bench(Path(tmp) / "bench.db", args.calls, args.runs))


if __name__ == "__main__":
    main()
