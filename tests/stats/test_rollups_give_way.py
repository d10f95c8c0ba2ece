"""On Postgres no release waits behind a rollup step: the step runs on a connection of its own beside the
batches, so a release that comes while it runs is committed first; the rollups still catch up under releases
that never pause, and stay exact (SQLite, one writer at a time, runs the step between batches)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.store import tables
from proxy.store import writer as writer_module
from proxy.store.writer import StoreWriter

from .builder import Store
from .test_rollups import build_traffic
from .test_rollups_after_release import _assert_figures_equal_rows, _pending

pytestmark = pytest.mark.each_database

Parts = list[list[tuple[Any, dict[str, Any]]]]


def _parts(seed: int, count: int) -> Parts:
    """Generated traffic split into `count` parts, each a release's worth of rows."""
    store = Store()
    build_traffic(store, random.Random(seed))
    rows = {name: list(batch) for name, batch in store.rows.items()}
    return [[(tables.metadata.tables[name], row) for name, batch in rows.items() for row in batch[part::count]]
            for part in range(count)]


async def _until(condition: Callable[[], Awaitable[Any]], what: str) -> None:
    for _ in range(1000):
        if await condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def _blocked_rollup_waiters(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"))).scalar_one())


async def test_a_release_that_comes_while_a_rollup_step_runs_is_committed_before_the_step(
        engine: AsyncEngine, backend: str, monkeypatch: pytest.MonkeyPatch):
    if backend == "sqlite":
        pytest.skip("SQLite lets one writer in at a time: its rollup step runs between batches")
    monkeypatch.setattr(writer_module, "_ROLLUP_DELAY_SECONDS", 0.0)  # a step is due once a batch is in
    first, second = _parts(21, 2)
    # Hold one of the first batch's sessions' locks (the error runs' replica lock): its rollup step waits there.
    session = sorted(row["session_id"] for table, row in first if table is tables.tool_calls)[0]
    hold = await engine.connect()
    await hold.begin()
    await hold.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:s, 0))"), {"s": session})
    writer = StoreWriter(engine)
    await writer.start()
    try:
        writer.put_many(first)
        await writer.commit(10)
        await _until(lambda: _blocked_rollup_waiters(engine), "the rollup step waits for the session lock")
        writer.put_many(second)
        await writer.commit(10)
        # The release is committed while the first batch's rollup step still waits: its marker is still there.
        assert await _pending(engine) == 2
        await hold.rollback()
        await writer.rollups_settled(10)
        assert await _pending(engine) == 0
    finally:
        await hold.close()
        await writer.stop()
    await _assert_figures_equal_rows(engine)


async def test_the_rollups_catch_up_while_releases_never_pause(engine: AsyncEngine, backend: str,
                                                               monkeypatch: pytest.MonkeyPatch):
    parts = _parts(22, 60)
    writer = StoreWriter(engine)
    writer.max_unrolled = 8  # steps by count on both backends (Postgres' own, 64, would outlast these releases)
    most = 0
    write = writer._write

    async def counting(batch: Any) -> None:
        nonlocal most
        await write(batch)
        most = max(most, len(writer._unrolled))

    monkeypatch.setattr(writer, "_write", counting)
    await writer.start()

    async def releases(mine: Parts) -> None:  # one after another, as a busy client's calls come
        for part in mine:
            writer.put_many(part)
            await writer.commit(10)

    try:
        await asyncio.gather(*(releases(parts[i::6]) for i in range(6)))
        if backend == "sqlite":  # a step once `max_unrolled` batches wait, releases queued or not
            assert most <= writer.max_unrolled
        else:  # a step at a time beside the batches, each taking what was committed before it started
            assert most < len(parts) // 2
        await writer.rollups_settled(10)
        assert await _pending(engine) == 0
    finally:
        await writer.stop()
    await _assert_figures_equal_rows(engine)
    async with engine.connect() as conn:
        counted = (await conn.execute(select(func.sum(tables.stats_calls.c.n)))).scalar_one()
    assert counted == sum(1 for part in parts for table, _ in part if table is tables.tool_calls)
