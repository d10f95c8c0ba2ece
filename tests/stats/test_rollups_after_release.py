"""The writer releases a batch once its rows are committed and adds it to the rollups in the next transaction:
a proxy killed between the two leaves a `stats_pending` marker, and the next start rolls those rows up, so the
figures equal the rows again, each batch counted once."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.store import figures, pending_rollups, queries, rollups, tables
from proxy.store.writer import StoreWriter

from .builder import Store
from .test_rollups import build_traffic, run_keys, stored_runs, windows

pytestmark = pytest.mark.each_database


class _KilledBeforeRollups(StoreWriter):
    """A writer whose process dies right after releasing each batch: the rollup step never runs."""

    async def _roll_up(self) -> None:
        self._unrolled = []
        self._settled.set()


async def _write(writer: StoreWriter, seed: int, batches: int) -> None:
    """Start the writer and queue generated traffic in several batches, each waited for as the release point
    waits."""
    store = Store()
    build_traffic(store, random.Random(seed))
    await writer.start()
    rows = {name: list(batch) for name, batch in store.rows.items()}
    for part in range(batches):
        writer.put_many((tables.metadata.tables[name], row) for name, batch in rows.items()
                        for row in batch[part::batches])
        await writer.commit(30)


async def _pending(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(tables.stats_pending))).scalar_one())


async def _assert_figures_equal_rows(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        for f in windows(random.Random(5), 12):
            assert await figures.call_counts(conn, f) == await queries.call_counts_from_rows(conn, f), f
            assert await figures.reason_counts(conn, f) == await queries.reason_counts_from_rows(conn, f), f
            assert await figures.request_counts(conn, f) == await queries.request_counts_from_rows(conn, f), f
            assert await figures.attempt_histograms(conn, f) == await queries.attempt_histograms_from_rows(conn, f), f


async def test_rollups_killed_between_the_two_transactions_are_applied_at_the_next_start(engine: AsyncEngine):
    killed = _KilledBeforeRollups(engine)
    await _write(killed, 11, batches=5)
    await killed.stop()
    assert await _pending(engine) == 5  # every released batch is in the rows, none in the rollups

    restarted = StoreWriter(engine)
    await restarted.start()  # catches up before it writes anything
    await restarted.stop()
    assert await _pending(engine) == 0
    await _assert_figures_equal_rows(engine)
    reference = run_keys(await stored_runs(engine))
    async with engine.begin() as conn:
        await conn.run_sync(rollups.rebuild)
    assert run_keys(await stored_runs(engine)) == reference


async def test_the_writer_rolls_up_right_after_release_and_a_marker_counts_once(engine: AsyncEngine):
    writer = StoreWriter(engine)
    await _write(writer, 12, batches=4)
    await writer.rollups_settled()
    assert await _pending(engine) == 0
    await _assert_figures_equal_rows(engine)
    async with engine.begin() as conn:  # a start-up catching up finds nothing left to add
        assert await conn.run_sync(pending_rollups.catch_up) == 0
    await writer.stop()
    await _assert_figures_equal_rows(engine)


class _KeepingMarkers(StoreWriter):
    """A writer whose rollup steps never run; it keeps what they were given, to be applied by the test."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self.kept: list[tuple[str, dict[str, list[dict[str, Any]]]]] = []

    async def _roll_up(self) -> None:
        self.kept.extend(self._unrolled)
        self._unrolled = []
        self._settled.set()


async def test_a_rollup_step_adds_the_batches_whose_markers_it_deleted_and_no_other(engine: AsyncEngine):
    writer = _KeepingMarkers(engine)
    await _write(writer, 13, batches=3)
    await writer.stop()
    assert len(writer.kept) >= 3
    gone, _ = writer.kept[1]
    async with engine.begin() as conn:  # another replica's rollup step applied this one already
        await conn.execute(delete(tables.stats_pending).where(tables.stats_pending.c.id == gone))
    async with engine.begin() as conn:
        applied = await conn.run_sync(pending_rollups.apply_many, [
            (marker, grouped.get("tool_calls", []), grouped.get("requests", [])) for marker, grouped in writer.kept])
    assert applied == len(writer.kept) - 1
    assert await _pending(engine) == 0
    async with engine.connect() as conn:
        counted = (await conn.execute(select(func.sum(tables.stats_calls.c.n)))).scalar_one()
    assert counted == sum(len(grouped.get("tool_calls", [])) for marker, grouped in writer.kept if marker != gone)
