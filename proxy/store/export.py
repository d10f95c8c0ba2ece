"""`allowlist-proxy db export`: the tool calls or the requests, oldest first, as CSV or JSON Lines, streamed
from the store (a million rows never sit in memory)."""

from __future__ import annotations

import csv
import json
from typing import Any, Literal, TextIO

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.store import tables

__all__ = ["export_rows"]

_TABLES = {"calls": (tables.tool_calls, tables.tool_calls.c.created_at),
           "requests": (tables.requests, tables.requests.c.started_at)}


async def export_rows(engine: AsyncEngine, out: TextIO, *, table: Literal["calls", "requests"],
                      fmt: Literal["csv", "jsonl"], since: float | None = None, until: float | None = None) -> int:
    source, at = _TABLES[table]
    stmt = select(source).order_by(at)
    if since is not None:
        stmt = stmt.where(at >= since)
    if until is not None:
        stmt = stmt.where(at < until)
    names = [column.name for column in source.columns]
    writer: Any = None
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=names)
        writer.writeheader()
    count = 0
    async with engine.connect() as conn:
        result = await conn.stream(stmt.execution_options(yield_per=5000))
        async for row in result:
            record = dict(row._mapping)
            if writer is not None:
                writer.writerow(record)
            else:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count
