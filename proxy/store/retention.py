"""Retention: rows older than a cut leave the store, and the hourly rollups and error runs with them (the
all-time totals are then summed again from what is kept).

The cut is taken down to a whole hour, so every rollup row is either wholly kept or wholly removed: the
figures of any window that starts at or after the cut read the same before and after a prune. An error run
is removed only when it ended before the cut; one that straddles it keeps its row (its start lies before any
kept window, so no kept window counts it). Sessions and conversation lineage go once nothing kept refers to
them, so a conversation still going continues its session.

`allowlist-proxy db prune --before DATE` runs it once; the `retention_days` setting runs it hourly in the
background (`Retention`).
"""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import Connection, delete, inspect, select
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.logs import get_logger
from proxy.store import tables, totals
from proxy.store.rollups import ROLLUP_TABLES, bucket_of
from proxy.tasks import cancel_and_wait

__all__ = ["Retention", "prune", "prune_store"]

log = get_logger("proxy.store.retention")

_DAY = 86400.0
_EVERY_SECONDS = 3600.0


def prune(conn: Connection, before: float) -> dict[str, int]:
    """Delete what lies before `before` (Unix seconds, taken down to the hour); the rows deleted per table."""
    cut = bucket_of(before)
    deleted: dict[str, int] = {}

    def remove(table: object, condition: object) -> None:
        result = conn.execute(delete(table).where(condition))  # type: ignore[arg-type]
        deleted[table.name] = deleted.get(table.name, 0) + (result.rowcount or 0)  # type: ignore[attr-defined]

    t = tables
    remove(t.tool_call_reasons, t.tool_call_reasons.c.created_at < cut)
    remove(t.tool_calls, t.tool_calls.c.created_at < cut)
    remove(t.requests, t.requests.c.started_at < cut)
    remove(t.throughput_windows, t.throughput_windows.c.window_start < cut)
    remove(t.secret_redactions, t.secret_redactions.c.created_at < cut)
    inspector = inspect(conn)
    for table in ROLLUP_TABLES:
        if inspector.has_table(table.name):
            remove(table, table.c.bucket < cut)
    remove(tables.error_runs, tables.error_runs.c.end_at < cut)
    kept = select(t.requests.c.session_id).union(select(t.tool_calls.c.session_id))
    remove(t.session_lineage, (t.session_lineage.c.created_at < cut) & t.session_lineage.c.session_id.not_in(kept))
    remove(t.session_roots, (t.session_roots.c.created_at < cut) & t.session_roots.c.session_id.not_in(kept))
    remove(t.sessions, (t.sessions.c.created_at < cut) & t.sessions.c.id.not_in(kept))
    remove(t.response_chains, t.response_chains.c.created_at < cut)
    if totals.present(conn):
        totals.refresh(conn)  # the sums of what is kept
    return deleted


async def prune_store(engine: AsyncEngine, before: float) -> dict[str, int]:
    """`prune` in one transaction: readers see the store before it or after it."""
    async with engine.begin() as conn:
        return await conn.run_sync(prune, before)


class Retention:
    """Prunes what is older than `days` once at start and then every hour, while the proxy serves."""

    def __init__(self, engine: AsyncEngine, days: float) -> None:
        self._engine = engine
        self._days = days
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> dict[str, int]:
        deleted = await prune_store(self._engine, time.time() - self._days * _DAY)
        if any(deleted.values()):
            log.info("store.pruned", retention_days=self._days, deleted={k: v for k, v in deleted.items() if v})
        return deleted

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception as exc:  # the store is down for now: the writer reports that; try next hour
                log.warning("store.prune_failed", error=str(exc))
            await asyncio.sleep(_EVERY_SECONDS)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="store-retention")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
