"""The single writer: every record goes through one queue and is inserted in batches, so the
response path never waits on the disk.

A batch that fails for a passing reason (a lock, a lost connection) is retried with back-off,
rows kept in order; a batch refused for its content is retried row by row so one bad row
cannot hold back the others, and that row is logged and counted, never dropped silently.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DataError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from proxy.logs import get_logger
from proxy.metrics import STORE_QUEUE_DEPTH, STORE_WRITE_FAILURES
from proxy.store import rollups, tables

__all__ = ["StoreWriter", "insert_rows"]

log = get_logger("proxy.store.writer")

# Inserted in this order within a batch so readers never see a call without its request.
_TABLE_ORDER = {t.name: i for i, t in enumerate(
    (tables.sessions, tables.session_lineage, tables.requests, tables.tool_calls, tables.tool_call_reasons)
)}
# Rows of these tables may be written again by another request or replica: first one wins.
_INSERT_OR_IGNORE = {"sessions", "session_lineage"}


class StoreWriter:
    def __init__(self, engine: AsyncEngine, *, batch_size: int = 500, flush_seconds: float = 0.05) -> None:
        self._engine = engine
        self._batch_size = batch_size
        self._flush_seconds = flush_seconds
        self._queue: deque[tuple[Table, dict[str, Any]]] = deque()
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.rows_written = 0
        self.rows_rejected = 0
        self.failures = 0

    @property
    def depth(self) -> int:
        return len(self._queue)

    def put(self, table: Table, row: dict[str, Any]) -> None:
        self._queue.append((table, row))
        self._idle.clear()
        STORE_QUEUE_DEPTH.set(len(self._queue))
        if len(self._queue) >= self._batch_size:
            self._wakeup.set()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="store-writer")

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every row queued so far is written."""
        self._wakeup.set()
        await asyncio.wait_for(self._idle.wait(), timeout)

    async def stop(self, timeout: float = 30.0) -> None:
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, timeout)
            except TimeoutError:
                log.error("store.flush_incomplete", rows_left=len(self._queue))
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
            self._task = None

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            if not self._queue:
                self._idle.set()
                if self._closing:
                    return
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout=1.0)
                continue
            if len(self._queue) < self._batch_size and not self._closing:
                # Gather a little more so one transaction carries many rows.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout=self._flush_seconds)
                self._wakeup.clear()
            batch = [self._queue.popleft() for _ in range(min(self._batch_size, len(self._queue)))]
            try:
                await self._write(batch)
                backoff = 0.1
            except (IntegrityError, DataError) as exc:
                log.warning("store.batch_refused", error=str(exc.orig), rows=len(batch))
                await self._write_one_by_one(batch)
            except (SQLAlchemyError, OSError) as exc:
                self.failures += 1
                STORE_WRITE_FAILURES.inc()
                log.error("store.write_failed", error=str(exc), rows=len(batch), retry_in=backoff)
                self._queue.extendleft(reversed(batch))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            except asyncio.CancelledError:
                self._queue.extendleft(reversed(batch))
                raise
            STORE_QUEUE_DEPTH.set(len(self._queue))

    async def _write(self, batch: list[tuple[Table, dict[str, Any]]]) -> None:
        grouped: dict[str, tuple[Table, list[dict[str, Any]]]] = {}
        for table, row in batch:
            grouped.setdefault(table.name, (table, []))[1].append(row)
        async with self._engine.begin() as conn:
            await insert_rows(conn, {name: rows for name, (_, rows) in grouped.items()})
        self.rows_written += len(batch)

    async def _write_one_by_one(self, batch: list[tuple[Table, dict[str, Any]]]) -> None:
        for table, row in batch:
            try:
                await self._write([(table, row)])
            except (IntegrityError, DataError) as exc:
                self.rows_rejected += 1
                STORE_WRITE_FAILURES.inc()
                log.error("store.row_rejected", table=table.name, error=str(exc.orig), row=_brief(row))


async def insert_rows(conn: AsyncConnection, rows: Mapping[str, list[dict[str, Any]]]) -> None:
    """Insert rows by table name, in the order readers rely on, and fold them into the stats' rollups in the
    same transaction (so the rollups never count a row that is not there, or miss one that is)."""
    for name in sorted(rows, key=lambda n: _TABLE_ORDER.get(n, 99)):
        if rows[name]:
            table = tables.metadata.tables[name]
            await conn.execute(_insert(table, conn.dialect.name), rows[name])
    calls, reqs = rows.get("tool_calls", []), rows.get("requests", [])
    if calls or reqs:
        await conn.run_sync(rollups.apply_rows, calls, reqs)


def _insert(table: Table, dialect: str) -> Any:
    if table.name in _INSERT_OR_IGNORE:
        if dialect == "sqlite":
            return sqlite.insert(table).on_conflict_do_nothing()
        if dialect == "postgresql":
            return postgresql.insert(table).on_conflict_do_nothing()
    return table.insert()


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v[:200] if isinstance(v, str) else v) for k, v in row.items()}
