"""No release waits behind a rollup step: on Postgres the step runs on a connection of its own beside the
batches; on SQLite (one writer at a time) it gives way to a release that comes while it runs, rolled back and
tried again after. Either way the release is committed first, and the rollups still catch up and stay exact."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.store import rollups, tables
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
    monkeypatch.setattr(writer_module, "_ROLLUP_DELAY_SECONDS", 0.0)  # a step is due once a batch is in
    first, second = _parts(21, 2)
    step_started, go_on = threading.Event(), threading.Event()
    hold: Any = None
    if backend == "sqlite":
        # The step runs on the writer's own thread: hold it there, mid-transaction, until the release is queued.
        apply_rows = rollups.apply_rows

        def held(*args: Any) -> None:
            if not step_started.is_set():
                step_started.set()
                assert go_on.wait(10)
            apply_rows(*args)

        monkeypatch.setattr(rollups, "apply_rows", held)
    else:
        # The step runs beside the batches: hold one of its sessions' locks (the error runs' replica lock).
        session = sorted(row["session_id"] for table, row in first if table is tables.tool_calls)[0]
        hold = await engine.connect()
        await hold.begin()
        await hold.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:s, 0))"), {"s": session})

    writer = StoreWriter(engine)
    await writer.start()
    try:
        writer.put_many(first)
        await writer.commit(10)
        if backend == "sqlite":
            assert await asyncio.get_running_loop().run_in_executor(None, step_started.wait, 10)
        else:
            await _until(lambda: _blocked_rollup_waiters(engine), "the rollup step waits for the session lock")
        writer.put_many(second)
        release = asyncio.create_task(writer.commit(10))
        await asyncio.sleep(0)  # the release is queued: the step gives way (SQLite) or runs on beside it
        go_on.set()
        await release
        # The release is committed and the first batch's rollups are not: its marker is still there.
        assert await _pending(engine) == 2
        if hold is not None:
            await hold.rollback()
            await hold.close()
            hold = None
        await writer.rollups_settled(10)
        assert await _pending(engine) == 0
        assert writer.rollups_given_way == (1 if backend == "sqlite" else 0)
    finally:
        go_on.set()
        if hold is not None:
            await hold.close()
        await writer.stop()
    await _assert_figures_equal_rows(engine)


async def test_the_rollups_catch_up_while_releases_never_pause(engine: AsyncEngine,
                                                               monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(writer_module, "_MAX_DEFERRED", 6)
    parts = _parts(22, 60)
    writer = StoreWriter(engine)
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
        assert most <= 6  # the rollups trailed by a few batches at most
        await writer.rollups_settled(10)
        assert await _pending(engine) == 0
    finally:
        await writer.stop()
    await _assert_figures_equal_rows(engine)
    async with engine.connect() as conn:
        counted = (await conn.execute(select(func.sum(tables.stats_calls.c.n)))).scalar_one()
    assert counted == sum(1 for part in parts for table, _ in part if table is tables.tool_calls)
