"""The all-time totals (proxy/store/totals.py) equal the hourly rollups summed per session and bin, however
the rows arrived (batches out of order, a late call splitting a loop), after a prune, a rebuild, and the
migration that adds them to a store that already holds rows (SQLite and Postgres)."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.store import figures, queries, rollups
from proxy.store.db import create_engine
from proxy.store.queries import Filters
from proxy.store.retention import prune_store

from .builder import ALLOWED, PIPE, START, Store
from .test_rollups import HOUR, build, migrated_from_before_the_rollups

pytestmark = pytest.mark.each_database


async def assert_totals_equal_the_hours(engine: AsyncEngine) -> None:
    """Each figure the totals serve, from the totals (no window) and from every hour's rollups (a window from
    the epoch, which reads the same rows by the hour), for the whole store and for one model."""
    async with engine.connect() as conn:
        for model in (None, "a", "m"):
            whole, hours = Filters(model=model), Filters(since=0.0, model=model)
            assert figures.whole_store(whole) and not figures.whole_store(hours)
            assert await figures.session_error_counts(conn, whole) == await figures.session_error_counts(conn, hours)
            rows = await queries.session_error_counts_from_rows(conn, whole)
            assert await figures.session_error_counts(conn, whole) == {m: sorted(v) for m, v in rows.items()}
            assert await figures.session_recoveries(conn, whole) == await figures.session_recoveries(conn, hours)
            assert await figures.latency_bins(conn, whole) == await figures.latency_bins(conn, hours)


async def test_totals_kept_by_the_writer_equal_the_hours(engine: AsyncEngine):
    await build(engine, batches=11)
    await assert_totals_equal_the_hours(engine)
    async with engine.connect() as conn:
        found = await figures.session_recoveries(conn, Filters())
    assert any(r.recovered for units in found.values() for r in units)


async def test_a_late_call_that_splits_a_loop_changes_the_totals_as_the_runs(engine: AsyncEngine):
    store = Store()
    request = store.session("m").request()
    first = request.calls(PIPE, PIPE, PIPE, PIPE, ALLOWED)
    await store.save(engine)
    async with engine.connect() as conn:
        assert [tuple(r) for r in (await figures.session_recoveries(conn, Filters()))["m"]] == [(1, 4)]
    request.call(ALLOWED, at=(first[1]["created_at"] + first[2]["created_at"]) / 2)
    await store.save(engine)
    async with engine.connect() as conn:
        assert [tuple(r) for r in (await figures.session_recoveries(conn, Filters()))["m"]] == [(2, 4)]
    await assert_totals_equal_the_hours(engine)


async def test_totals_after_a_prune_and_a_rebuild(engine: AsyncEngine):
    await build(engine)
    await prune_store(engine, START + 4 * HOUR + 1234.0)
    await assert_totals_equal_the_hours(engine)
    async with engine.connect() as conn:
        before = await figures.session_error_counts(conn, Filters())
    async with engine.begin() as conn:
        await conn.run_sync(rollups.rebuild)
    await assert_totals_equal_the_hours(engine)
    async with engine.connect() as conn:
        assert await figures.session_error_counts(conn, Filters()) == before


async def test_the_migration_fills_the_totals_of_a_store_that_already_has_rows(empty_db_url: str):
    engine = create_engine(empty_db_url)
    try:
        await migrated_from_before_the_rollups(engine)
        await assert_totals_equal_the_hours(engine)
        async with engine.connect() as conn:
            assert await figures.session_error_counts(conn, Filters())
    finally:
        await engine.dispose()
