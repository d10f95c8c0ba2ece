"""Retention: `db prune --before DATE` removes the old rows with their hourly figures, and the statistics of
every window inside what is kept read the same before and after (SQLite and Postgres)."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.cli.db import parse_date
from proxy.stats.models import model_stats, top_loops
from proxy.store import figures, queries, tables
from proxy.store.export import export_rows
from proxy.store.queries import Filters
from proxy.store.retention import Retention, prune_store
from proxy.store.rollups import bucket_of

from .builder import START
from .test_rollups import HOUR, build, rounded

CUT = START + 4 * HOUR + 1234.0  # mid-hour: taken down to the hour
KEPT = bucket_of(CUT)


async def _figures(engine: AsyncEngine, since: float, until: float | None) -> list:
    stats = await model_stats(engine, since=since, until=until)
    stats.pop("window", None)
    loops = await top_loops(engine, since=since, until=until)
    return rounded([stats, loops])


async def test_stats_of_the_kept_window_agree_before_and_after_a_prune(engine: AsyncEngine):
    store = await build(engine)
    end = max(r["created_at"] for r in store.rows["tool_calls"]) + 1
    windows = [(KEPT, None), (KEPT, end), (KEPT + HOUR, KEPT + 3 * HOUR), (KEPT + 1800, KEPT + 5 * HOUR + 7)]
    before = [await _figures(engine, since, until) for since, until in windows]
    assert all(stats["models"] for stats, _loops in before) and any(loops for _stats, loops in before)
    whole = await _figures(engine, START - HOUR, None)
    deleted = await prune_store(engine, CUT)
    assert deleted["tool_calls"] > 0 and deleted["requests"] > 0 and deleted["stats_calls"] > 0
    after = [await _figures(engine, since, until) for since, until in windows]
    assert after == before
    assert await _figures(engine, START - HOUR, None) != whole  # the pruned hours are gone from the figures
    async with engine.connect() as conn:
        oldest = await conn.scalar(select(func.min(tables.tool_calls.c.created_at)))
        assert oldest >= KEPT
        assert await conn.scalar(select(func.min(tables.stats_calls.c.bucket))) >= KEPT
        # The rollups that remain still equal the rows that remain, for the whole store.
        for f in (Filters(), Filters(since=KEPT + 900)):
            assert await figures.call_counts(conn, f) == await queries.call_counts_from_rows(conn, f)
            assert await figures.request_counts(conn, f) == await queries.request_counts_from_rows(conn, f)
    assert all(v == 0 for v in (await prune_store(engine, CUT)).values())  # twice: nothing more


async def test_retention_days_prunes_in_the_background(engine: AsyncEngine):
    await build(engine)
    now = START + 20 * HOUR
    retention = Retention(engine, days=(now - CUT) / 86400)
    import proxy.store.retention as module
    real_time = module.time.time
    module.time.time = lambda: now  # type: ignore[assignment]
    try:
        deleted = await retention.run_once()
    finally:
        module.time.time = real_time  # type: ignore[assignment]
    assert deleted["tool_calls"] > 0
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.min(tables.tool_calls.c.created_at))) >= KEPT


async def test_export_writes_calls_and_requests_as_csv_and_jsonl(engine: AsyncEngine):
    store = await build(engine, batches=1)
    out = io.StringIO()
    count = await export_rows(engine, out, table="calls", fmt="csv")
    assert count == len(store.rows["tool_calls"])
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert len(rows) == count and {"tool_name", "command", "decision", "reasons"} <= set(rows[0])
    out = io.StringIO()
    since = START + 2 * HOUR
    count = await export_rows(engine, out, table="requests", fmt="jsonl", since=since)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == count == sum(1 for r in store.rows["requests"] if r["started_at"] >= since)
    assert [r["started_at"] for r in lines] == sorted(r["started_at"] for r in lines)


def test_dates_are_utc_unless_they_name_a_zone():
    assert parse_date("2026-01-31") == datetime(2026, 1, 31, tzinfo=UTC).timestamp()
    assert parse_date("2026-01-31T12:00+02:00") == datetime(2026, 1, 31, 10, tzinfo=UTC).timestamp()




def test_the_cli_prunes_and_exports(tmp_path, capsys):
    from proxy.cli import main

    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert main(["db", "upgrade", "--db", url]) == 0
    assert main(["db", "prune", "--before", "2026-01-01", "--db", url]) == 0
    assert "pruned before 2026-01-01T00:00" in capsys.readouterr().out
    out = tmp_path / "calls.jsonl"
    assert main(["db", "export", "--format", "jsonl", "-o", str(out), "--db", url]) == 0
    assert out.read_text() == "" and "0 calls written" in capsys.readouterr().err
