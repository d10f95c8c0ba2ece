"""`allowlist-proxy db export`: the tool calls or the requests, oldest first, as CSV, JSON Lines or Parquet,
streamed from the store (a million rows never sit in memory).

Times (the columns stored as Unix seconds, `*_at`) are written as ISO 8601 in UTC with microseconds, Parquet
timestamps in Parquet; booleans as `true`/`false` in CSV and JSON alike. Parquet needs pyarrow (the optional
`[parquet]` extra).
"""

from __future__ import annotations

import csv
import importlib.util
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any, Literal

from sqlalchemy import Boolean, Column, Float, Integer, Table, select
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.store import tables

__all__ = ["ParquetMissing", "export_rows", "parquet_available"]

_TABLES = {"calls": (tables.tool_calls, tables.tool_calls.c.created_at),
           "requests": (tables.requests, tables.requests.c.started_at)}
_BATCH = 5000


class ParquetMissing(RuntimeError):
    """Parquet was asked for where pyarrow is not installed."""


def parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def _is_time(column: Column[Any]) -> bool:
    return isinstance(column.type, Float) and column.name.endswith("_at")


def _moment(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _iso(seconds: float | None) -> str | None:
    moment = _moment(seconds)
    return None if moment is None else moment.isoformat(timespec="microseconds")


async def export_rows(engine: AsyncEngine, out: IO[Any], *, table: Literal["calls", "requests"],
                      fmt: Literal["csv", "jsonl", "parquet"], since: float | None = None,
                      until: float | None = None) -> int:
    """Write the rows of `table` created in [since, until) to `out` (text for csv/jsonl, binary for parquet);
    returns how many."""
    source, at = _TABLES[table]
    if fmt == "parquet" and not parquet_available():
        raise ParquetMissing("Parquet needs pyarrow: pip install 'allowlist-proxy[parquet]' (or use csv or jsonl)")
    stmt = select(source).order_by(at)
    if since is not None:
        stmt = stmt.where(at >= since)
    if until is not None:
        stmt = stmt.where(at < until)
    sink = _Parquet(source, out) if fmt == "parquet" else _Text(source, out, fmt)
    count = 0
    async with engine.connect() as conn:
        result = await conn.stream(stmt.execution_options(yield_per=_BATCH))
        async for row in result:
            sink.write(row._mapping)
            count += 1
    sink.close()
    return count


class _Text:
    """CSV or JSON Lines, a row at a time."""

    def __init__(self, source: Table, out: IO[str], fmt: str) -> None:
        self._out = out
        self._times = {c.name for c in source.columns if _is_time(c)}
        self._flags = {c.name for c in source.columns if isinstance(c.type, Boolean)}
        self._csv: csv.DictWriter[str] | None = None
        if fmt == "csv":
            self._csv = csv.DictWriter(out, fieldnames=[c.name for c in source.columns])
            self._csv.writeheader()

    def write(self, row: Mapping[Any, Any]) -> None:
        record = dict(row)
        for name in self._times:
            record[name] = _iso(record[name])
        if self._csv is not None:
            for name in self._flags:
                if record[name] is not None:
                    record[name] = "true" if record[name] else "false"
            self._csv.writerow(record)
        else:
            for name in self._flags:  # SQLite hands back 0/1 where a column was written by raw SQL
                if record[name] is not None:
                    record[name] = bool(record[name])
            self._out.write(json.dumps(record, ensure_ascii=False) + "\n")

    def close(self) -> None:
        pass


class _Parquet:
    """A Parquet file written a row group per batch, with the columns' own types (times as UTC timestamps)."""

    def __init__(self, source: Table, out: IO[bytes]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        def kind(column: Column[Any]) -> Any:
            if _is_time(column):
                return pa.timestamp("us", tz="UTC")
            if isinstance(column.type, Boolean):
                return pa.bool_()
            if isinstance(column.type, Integer):
                return pa.int64()
            if isinstance(column.type, Float):
                return pa.float64()
            return pa.string()

        self._pa = pa
        self._schema = pa.schema([(c.name, kind(c)) for c in source.columns])
        self._times = {c.name for c in source.columns if _is_time(c)}
        self._writer = pq.ParquetWriter(out, self._schema)
        self._rows: list[dict[str, Any]] = []

    def write(self, row: Mapping[Any, Any]) -> None:
        record = dict(row)
        for name in self._times:
            record[name] = _moment(record[name])
        self._rows.append(record)
        if len(self._rows) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            self._writer.write_table(self._pa.Table.from_pylist(self._rows, schema=self._schema))
            self._rows = []

    def close(self) -> None:
        self._flush()
        self._writer.close()
