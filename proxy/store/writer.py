"""The single writer: every record goes through one bounded queue and is inserted in batches.

Group commit: every `put` wakes the writer; rows nobody waits for are gathered for at most
`flush_seconds` (or until a batch is full), and rows someone waits for (`commit`, the release point
of enforce mode) go at once, together with whatever else is queued. While one transaction runs, new
rows gather for the next, so concurrent requests share transactions without any of them sleeping.

Failures are told apart by a probe, not by the driver's exception classes (asyncpg's are not SQLAlchemy's
IntegrityError/DataError): when a batch fails and a probe write succeeds, a row is at fault, so the batch
is retried row by row and a refused row is stored again with its text made safe (`safe_text`); only a
row refused even then is dropped, logged and counted. When the probe fails too, the store is down: the
batch goes back to the head of the queue, the writer backs off, and `health()` says why until a write
succeeds. A SQLite file deleted or replaced under the running proxy counts as down (writes to an
unlinked file would otherwise succeed into nothing).

On Postgres no release waits behind the rollups: the rollup step (`_roll_up`) runs on a connection of its own
beside the batches, one step at a time, in commit order. SQLite lets one writer in at a time: there the step runs
between batches, once no release waits or `_MAX_UNROLLED` batches wait for it; on Postgres every
`_MAX_UNROLLED_BESIDE` batches or `_ROLLUP_DELAY_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Table, bindparam, delete
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from proxy import telemetry
from proxy.logs import get_logger
from proxy.store import pending_rollups, rollups, tables
from proxy.store.audit_statement import INSERT_OR_IGNORE, audit_statement
from proxy.store.dialect import backend_of, insert_ignore
from proxy.store.lane import WriterLane
from proxy.store.prepared import Prepared
from proxy.store.safe_text import safe_row
from proxy.tasks import cancel_and_wait

__all__ = ["StoreFailure", "StoreWriter", "insert_rows", "write_audit_rows"]

log = get_logger("proxy.store.writer")

P = ParamSpec("P")
T = TypeVar("T")

# Inserted in this order within a batch so readers never see a call without its request (or its journal entry).
_TABLE_ORDER = {t.name: i for i, t in enumerate(
    (tables.sessions, tables.session_lineage, tables.request_journal, tables.requests, tables.tool_calls,
     tables.tool_call_reasons)
)}
# Batches committed before a rollup step starts without waiting for `_ROLLUP_DELAY_SECONDS` (on SQLite, without
# waiting for the releases queued). On Postgres a step runs beside the batches and its cost is its statements (each
# a round trip through SQLAlchemy's adapter), not its rows: at 8 batches a step it was a tenth of an answer's CPU.
_MAX_UNROLLED = 8
_MAX_UNROLLED_BESIDE = 64
# A rollup step of at most this many rows runs on the event loop where the SQLite lane is idle (~1 ms): in the
# lane's thread it held the database while releases came, each then waiting for it, and for the hop back.
_ROLLUP_ON_LOOP_ROWS = 32
# How long committed batches wait for their rollups: the rows of a few answers share one rollup step (its
# statements cost more than the rows' own), and a stats read does not wait for it (`rollups_settled`).
_ROLLUP_DELAY_SECONDS = 2.0


class StoreFailure(Exception):
    """The rows someone waited for were not committed (the store is down, or refused them)."""


class StoreFileGone(StoreFailure):
    """The SQLite file was deleted or replaced: no retry can write to the file the proxy opened."""


@dataclass(slots=True)
class _Item:
    table: Table
    row: dict[str, Any]
    queued_at: float
    waiter: asyncio.Future[None] | None = None


class StoreWriter:
    def __init__(self, engine: AsyncEngine, *, batch_size: int = 500, flush_seconds: float = 0.05,
                 max_queue: int = 100_000) -> None:
        self._engine = engine
        self._lane = WriterLane(engine)  # where the transactions run (SQLite: sqlite3 in a thread of its own)
        # Postgres: a batch is one statement of its own, one round trip (proxy/store/audit_statement.py)
        self._one_statement = backend_of(engine).statement_is_round_trip
        self._batch_size = max(1, batch_size)
        self._flush_seconds = max(0.0, flush_seconds)
        self._max_queue = max(1, max_queue)
        self._queue: deque[_Item] = deque()
        self._in_flight: list[_Item] = []  # the batch being written now
        self._reported_depth = 0  # the depth the metrics were last told (`_report_depth`)
        self._wake_pending = False  # a `_wake` is due at the end of this turn of the loop
        self._wakeup = asyncio.Event()  # set by every put
        self._urgent = asyncio.Event()  # someone waits, a batch is full, or the writer is closing
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._sqlite_file = _sqlite_file(engine)
        self._sqlite_identity: tuple[int, int] | None = None
        # Who wrote a journal entry: a restarted proxy recovers the entries of owners that are gone.
        nonce = uuid.uuid4().hex[:12]
        self.owner = f"{socket.gethostname()[:64]}:{os.getpid()}:{nonce}"
        self._probe_id = f"probe:{nonce}"  # its own row: replicas probing one database never wait on each other
        self.rows_written = 0
        self.rows_rejected = 0
        self.rows_lost = 0
        self.failures = 0
        self.failing: str | None = None  # why the store cannot record now; None while it can
        self._last_probe = 0.0
        self._unrolled: list[tuple[str, dict[str, list[dict[str, Any]]]]] = []  # committed, not rolled up yet
        self._unrolled_since = 0.0  # when the oldest of them was committed
        self._rollups_wanted = False  # a reader waits for the rollups
        self._settled = asyncio.Event()  # set while _unrolled is empty and no step runs
        self._settled.set()
        self._rollups_behind = False
        # Postgres: the rollup step runs beside the batches, on a connection of its own (`_roll_up`).
        self._beside = backend_of(engine).concurrent_writers
        self._rolling: asyncio.Task[None] | None = None  # the step running beside, if any
        self.max_unrolled = _MAX_UNROLLED_BESIDE if self._beside else _MAX_UNROLLED

    @property
    def depth(self) -> int:
        return len(self._queue)

    @property
    def accepting(self) -> bool:
        """Whether rows put now can be expected to be committed soon."""
        return self.failing is None and len(self._queue) < self._max_queue

    def health(self) -> str | None:
        """None when the store records; else the reason it does not."""
        if self.failing is not None:
            return self.failing
        if len(self._queue) >= self._max_queue:
            return f"store queue full ({len(self._queue)} rows waiting)"
        return None

    # -- queueing

    def put(self, table: Table, row: dict[str, Any]) -> None:
        self.put_many([(table, row)])

    def put_many(self, rows: Iterable[tuple[Table, dict[str, Any]]]) -> None:
        """Queue rows in order; the writer is woken at the end of this turn of the loop unless they were written by
        then. A full queue drops them, counted and logged."""
        now = time.monotonic()
        waiting = bool(self._queue)
        for table, row in rows:
            if len(self._queue) >= self._max_queue:
                self._lose(table, "queue full")
                continue
            self._queue.append(_Item(table, row, now))
        self._idle.clear()
        if waiting:  # rows were already waiting: a backlog to show (rows into an empty queue go at once)
            self._report_depth()
        if not self._wake_pending:
            self._wake_pending = True
            try:
                asyncio.get_running_loop().call_soon(self._wake)
            except RuntimeError:  # queued from outside the loop: the writer wakes at once
                self._wake_pending = False
                self._wakeup.set()
        if len(self._queue) >= self._batch_size:
            self._urgent.set()

    async def commit(self, timeout: float | None = None) -> None:
        """Wait until every row queued so far is committed; raises StoreFailure when it was not."""
        if self._queue:
            tail = self._queue[-1]
        elif self._in_flight:
            tail = self._in_flight[-1]
        else:
            if self.failing is not None:
                raise StoreFailure(self.failing)
            return
        if self._commit_here():
            return
        if tail.waiter is None:
            tail.waiter = asyncio.get_running_loop().create_future()
        waiter = tail.waiter
        self._urgent.set()
        self._wakeup.set()
        try:
            async with asyncio.timeout(timeout):  # (no task made to wait, as wait_for makes one)
                await asyncio.shield(waiter)
        except TimeoutError as exc:
            raise StoreFailure(f"the store did not commit within {timeout:g} s") from exc

    def _wake(self) -> None:
        # At the end of the turn that queued the rows: a release commits its own rows in that turn (`_commit_here`),
        # and the writer's task need not wake only to find the queue empty.
        self._wake_pending = False
        if self._queue:
            self._wakeup.set()

    def _report_depth(self) -> None:
        """The queue's depth for the metrics, where it changed since last said."""
        depth = len(self._queue)
        if depth != self._reported_depth:
            self._reported_depth = depth
            telemetry.emit(telemetry.StoreQueue(depth))

    def _commit_here(self) -> bool:
        """Write everything queued in the caller's own turn of the event loop, where the writer is between batches
        and the lane can (SQLite, lane idle, database free): no hand-over to the writer's task and back. False
        where the writer must (a batch in flight, the store failing or closing, rollups behind, a write that
        failed or found the database busy); nothing has changed then, and the writer writes the batch."""
        if (self._in_flight or self.failing is not None or self._closing or self._rollups_behind
                or self._one_statement or len(self._queue) > self._batch_size):
            return False
        batch = list(self._queue)
        grouped = _grouped(batch)
        try:
            self._check_file()
            done, marker = self._lane.try_here(write_audit_rows, grouped)
        except Exception:  # told apart (a row at fault, the store down) by the writer, which writes it again
            return False
        if not done:
            return False
        self._queue.clear()  # the batch: nothing is queued while a transaction runs on the loop
        self._written(batch, grouped, marker)
        self._idle.set()
        self._report_depth()
        if self._unrolled and (len(self._unrolled) == 1 or self._should_roll_up()):
            self._wakeup.set()  # the writer times the rollup step from the oldest batch not rolled up
        return True

    async def start(self) -> None:
        if self._task is None:
            if self._sqlite_file is not None and self._sqlite_file.exists():
                st = self._sqlite_file.stat()
                self._sqlite_identity = (st.st_dev, st.st_ino)
            if await self.probe():
                await self._catch_up_quietly()
            telemetry.emit(telemetry.StoreHealth(self.failing is None))
            self._task = asyncio.create_task(self._run(), name="store-writer")

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every row queued so far is written (or given up), and rolled up."""
        self._urgent.set()
        self._wakeup.set()
        async with asyncio.timeout(timeout):
            await self._idle.wait()
            await self.rollups_settled(None)

    async def stop(self, timeout: float = 30.0) -> None:
        self._closing = True
        self._urgent.set()
        self._wakeup.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, timeout)
            except TimeoutError:
                log.error("store.flush_incomplete", rows_left=len(self._queue))
                await cancel_and_wait(self._task)
            self._task = None
        # The writer's task was cancelled while a rollup step ran beside it.
        rolling, self._rolling = self._rolling, None
        await cancel_and_wait(rolling)
        await self._lane.close()

    async def probe(self) -> bool:
        """Write (and delete) one journal row: can the store take a write now? Updates `failing`."""
        self._last_probe = time.monotonic()
        try:
            self._check_file()
            await self._lane.run(_probe_write, self._probe_id, self.owner)
        except Exception as exc:  # whatever the driver raises, the store cannot write
            self._mark_failing(exc)
            return False
        self._mark_ok()
        return True

    async def check(self, max_age: float = 2.0) -> str | None:
        """health(), with a fresh probe when the last one is older than max_age and nothing is queued."""
        if not self._queue and time.monotonic() - self._last_probe > max_age:
            await self.probe()
        return self.health()

    # -- the loop

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            if self._should_roll_up():
                await self._start_rollup_step()
            if not self._queue:
                self._idle.set()
                if self._closing:
                    if self._rolling is None:
                        return
                    await self._rolling  # then the batches committed meanwhile
                    continue
                self._wakeup.clear()
                self._urgent.clear()
                # While the store is failing, probe now and then so health recovers without traffic. A step
                # running beside wakes the writer when it ends.
                wait = (backoff if self.failing is not None
                        else None if self._rolling is not None else self._rollup_due_in())
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wakeup.wait()
                if not self._queue and self.failing is not None and not self._closing:
                    backoff = 0.1 if await self.probe() else min(backoff * 2, 5.0)
                continue
            if not self._urgent.is_set() and not self._closing:
                # Gather rows nobody waits for, until the oldest has waited flush_seconds.
                remaining = self._queue[0].queued_at + self._flush_seconds - time.monotonic()
                if remaining > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(remaining):
                            await self._urgent.wait()
            self._urgent.clear()
            batch = [self._queue.popleft() for _ in range(min(self._batch_size, len(self._queue)))]
            if not batch:  # written meanwhile by a release (`_commit_here`)
                continue
            self._in_flight = batch
            try:
                await self._write(batch)
            except asyncio.CancelledError:
                self._queue.extendleft(reversed(batch))
                raise
            except Exception as exc:  # told apart by the probe below, not by the exception's class
                if await self.probe():
                    log.warning("store.batch_refused", error=_error(exc), rows=len(batch))
                    await self._write_one_by_one(batch)
                else:
                    self.failures += 1
                    telemetry.emit(telemetry.StoreWriteFailed())
                    log.error("store.write_failed", error=_error(exc), rows=len(batch), retry_in=backoff)
                    _fail_waiters(batch, self.failing or _error(exc))
                    # At shutdown a store that may come back gets ~10 s of retries; a gone file never will.
                    if self._closing and (backoff >= 5.0 or isinstance(exc, StoreFileGone)):
                        self._drop(batch, "store down at shutdown")
                    else:
                        self._queue.extendleft(reversed(batch))
                    self._in_flight = []
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    self._report_depth()
                    continue
            finally:
                if self._in_flight is batch:
                    self._in_flight = []
            backoff = 0.1
            self._mark_ok()
            if self._rollups_behind and self._rolling is None:
                await self._catch_up_quietly()
            self._report_depth()

    async def _write(self, batch: list[_Item]) -> None:
        self._check_file()
        grouped = _grouped(batch)
        if self._one_statement:
            statement = audit_statement(self._engine.dialect, grouped)
            await self._lane.run_statement(statement.sql, statement.args)
            marker = statement.marker
        else:
            marker = await self._lane.run_here_if_idle(write_audit_rows, grouped)
        self._written(batch, grouped, marker)
        if marker is not None:
            # Let the released requests run first: one that queues its next rows at once is written before
            # the rollups (`_should_roll_up`).
            await asyncio.sleep(0)

    def _written(self, batch: list[_Item], grouped: dict[str, list[dict[str, Any]]], marker: str | None) -> None:
        self.rows_written += len(batch)
        _wake_waiters(batch)  # released here: the rollups follow in a transaction of their own
        if marker is not None:
            if not self._unrolled:
                self._unrolled_since = time.monotonic()
            self._unrolled.append((marker, grouped))
            self._settled.clear()

    def _should_roll_up(self) -> bool:
        # The rollups trail by a few batches, or two seconds, at most. On SQLite rows someone waits for go
        # first, up to `max_unrolled` batches; on Postgres the step runs beside them (`_start_rollup_step`).
        if not self._unrolled or self._rolling is not None:
            return False
        if self._closing or self._rollups_wanted or len(self._unrolled) >= self.max_unrolled:
            return True
        if self._rollup_due_in() != 0.0:
            return False
        return self._beside or not any(item.waiter is not None for item in self._queue)

    async def _start_rollup_step(self) -> None:
        if not self._beside:
            await self._roll_up()
            return

        async def step() -> None:
            try:
                await self._roll_up()
            finally:
                self._rolling = None
                self._wakeup.set()

        self._rolling = asyncio.create_task(step(), name="store-rollups")

    def _rollup_due_in(self) -> float | None:
        """Seconds until the committed batches' rollups are due; None when there are none."""
        if not self._unrolled:
            return None
        return max(0.0, self._unrolled_since + _ROLLUP_DELAY_SECONDS - time.monotonic())

    async def _roll_up(self) -> None:
        """Add the committed batches to the rollups in one transaction. Never raises: their rows are in, so a
        failure here leaves the markers for `catch_up` rather than failing (and re-inserting) the batches."""
        unrolled, self._unrolled = self._unrolled, []
        try:
            if sum(len(grouped.get("tool_calls", ())) + len(grouped.get("requests", ()))
                   for _marker, grouped in unrolled) <= _ROLLUP_ON_LOOP_ROWS:
                await self._lane.run_here_if_idle(_apply_markers, unrolled)
            else:
                await self._lane.run(_apply_markers, unrolled)
        except Exception as exc:  # the rows are committed; their rollups wait for the next catch-up
            self._rollups_behind = True
            log.error("store.rollups_behind", error=_error(exc))
        finally:
            if not self._unrolled:  # (on Postgres batches committed while the step ran wait for the next)
                self._rollups_wanted = False
                self._settled.set()

    async def transaction(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(connection, ...)` in a transaction of the writer's lane, between its batches (on the loop where the
        lane is idle): what the proxy writes beside the rows it queues (the throughput windows) takes its turn with
        them, never holding the database while releases wait."""
        return await self._lane.run_here_if_idle(fn, *args, **kwargs)

    async def catch_up_rollups(self) -> int:
        """Apply the rollups that a crash (or a failed rollup step) left behind; the number of batches."""
        applied = await self._lane.run(pending_rollups.catch_up)
        self._rollups_behind = False
        if applied:
            log.info("store.rollups_caught_up", batches=applied)
        return int(applied)

    async def rollups_settled(self, timeout: float | None = 30.0) -> None:
        """Wait until the rollups cover every batch committed so far (a stats read then sees them exact)."""
        if not self._settled.is_set():
            self._rollups_wanted = True
            self._wakeup.set()
            await asyncio.wait_for(self._settled.wait(), timeout)

    async def _write_one_by_one(self, batch: list[_Item]) -> None:
        for item in batch:
            try:
                await self._write([item])
                continue
            except Exception as exc:
                first_error = _error(exc)
            repaired = _Item(item.table, safe_row(item.table, item.row), item.queued_at, item.waiter)
            try:
                await self._write([repaired])
                self.rows_rejected += 1
                telemetry.emit(telemetry.StoreRowRepaired())
                log.warning("store.row_repaired", table=item.table.name, error=first_error, row=_brief(item.row))
            except Exception as exc:
                self.rows_rejected += 1
                self._lose(item.table, f"row refused: {_error(exc)}")
                log.error("store.row_rejected", table=item.table.name, error=_error(exc), row=_brief(item.row))
                _fail_waiters([item], f"the store refused a row of {item.table.name}")

    async def _catch_up_quietly(self) -> None:
        try:
            await self.catch_up_rollups()
        except Exception as exc:  # tried again after the next batch
            self._rollups_behind = True
            log.error("store.rollups_behind", error=_error(exc))

    # -- health

    def _check_file(self) -> None:
        if self._sqlite_file is None or self._sqlite_identity is None:
            return
        try:
            st = self._sqlite_file.stat()
        except FileNotFoundError:
            raise StoreFileGone(f"the SQLite file {self._sqlite_file.name} was deleted") from None
        if (st.st_dev, st.st_ino) != self._sqlite_identity:
            raise StoreFileGone(f"the SQLite file {self._sqlite_file.name} was replaced")

    def _mark_failing(self, exc: BaseException) -> None:
        reason = _error(exc)
        if self.failing != reason:
            log.error("store.failing", reason=reason)
        self.failing = reason
        telemetry.emit(telemetry.StoreHealth(False))

    def _mark_ok(self) -> None:
        if self.failing is not None:
            log.info("store.recovered", was=self.failing)
        self.failing = None
        telemetry.emit(telemetry.StoreHealth(True))

    def _lose(self, table: Table, why: str) -> None:
        self.rows_lost += 1
        telemetry.emit(telemetry.StoreRowLost(table.name))
        if self.rows_lost == 1 or self.rows_lost % 1000 == 0:
            log.error("store.rows_lost", table=table.name, why=why, lost_so_far=self.rows_lost)

    def _drop(self, batch: list[_Item], why: str) -> None:
        for item in batch:
            self._lose(item.table, why)


def _grouped(batch: list[_Item]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for item in batch:
        grouped.setdefault(item.table.name, []).append(item.row)
    return grouped


def _wake_waiters(batch: list[_Item]) -> None:
    for item in batch:
        if item.waiter is not None and not item.waiter.done():
            item.waiter.set_result(None)


def _fail_waiters(batch: list[_Item], reason: str) -> None:
    for item in batch:
        if item.waiter is not None and not item.waiter.done():
            item.waiter.set_exception(StoreFailure(reason))
            item.waiter.exception()  # retrieved here: a waiter that timed out must not warn at exit
            item.waiter = None


def _sqlite_file(engine: AsyncEngine) -> Path | None:
    url = engine.url
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database).resolve()


def _error(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    return f"{type(orig or exc).__name__}: {orig or exc}"[:500]


async def insert_rows(conn: AsyncConnection, rows: Mapping[str, list[dict[str, Any]]]) -> None:
    """Insert rows and fold them into the stats' rollups in the same transaction (imports and tests; the
    writer splits the two, see `write_audit_rows`)."""
    await conn.run_sync(write_audit_rows, rows, pending=False)
    calls, reqs = rows.get("tool_calls", []), rows.get("requests", [])
    if calls or reqs:
        await conn.run_sync(rollups.apply_rows, calls, reqs)


def write_audit_rows(conn: Connection, rows: Mapping[str, list[dict[str, Any]]], *, pending: bool = True) -> str | None:
    """Insert rows by table name, in the order readers rely on; a request's final row replaces its journal entry
    in the same transaction. With `pending`, a `stats_pending` marker names the rows whose rollups are still to
    be added (so a crash before they are cannot lose them); its id is returned, None when there is nothing to
    roll up."""
    for name in sorted(rows, key=lambda n: _TABLE_ORDER.get(n, 99)):
        _insert_into(name).run(conn, rows[name])
    calls, reqs = rows.get("tool_calls", []), rows.get("requests", [])
    _DELETE_JOURNAL.run(conn, [{"id": r["id"]} for r in reqs])
    if not pending or not (calls or reqs):
        return None
    marker = pending_rollups.marker_row(calls, reqs)
    _INSERT_MARKER.run(conn, [marker])
    return str(marker["id"])


@functools.cache
def _insert_into(name: str) -> Prepared:
    table = tables.metadata.tables[name]
    if name in INSERT_OR_IGNORE:
        return Prepared(lambda conn: insert_ignore(conn, table))
    return Prepared(lambda conn: table.insert())


_DELETE_JOURNAL = Prepared(lambda conn: delete(tables.request_journal)
                           .where(tables.request_journal.c.id == bindparam("id")))
_INSERT_MARKER = Prepared(lambda conn: tables.stats_pending.insert())


def _apply_markers(conn: Connection, unrolled: list[tuple[str, dict[str, list[dict[str, Any]]]]]) -> None:
    pending_rollups.apply_many(conn, [(marker, grouped.get("tool_calls", []), grouped.get("requests", []))
                                      for marker, grouped in unrolled])


def _probe_write(conn: Connection, probe_id: str, owner: str) -> None:
    journal = tables.request_journal
    conn.execute(journal.insert(), {"id": probe_id, "owner": owner, "created_at": time.time(), "row": "{}"})
    conn.execute(delete(journal).where(journal.c.id == probe_id))


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v[:200] if isinstance(v, str) else v) for k, v in row.items()}
