"""SQL of the live throughput windows: the additive upsert the ticker issues, and the reads behind the tables.

Kept apart from `proxy.store.queries` (the compliance statistics) because nothing else reads or writes
`throughput_windows`; the request-latency percentiles read `requests` the same way on SQLite and Postgres.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, and_, case, cast, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement

from proxy.store.db import StoreError
from proxy.store.tables import requests, throughput_windows

__all__ = ["LatencyCell", "WindowRow", "latency_percentiles", "read_windows", "upsert_windows"]

_KEY = ("model", "window_start", "seconds")
# The store runs on these two (see proxy.config); both spell the additive upsert as INSERT ... ON CONFLICT.
_UPSERTS = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}


@dataclass(frozen=True, slots=True)
class WindowRow:
    model: str
    window_start: float
    seconds: float
    running: int
    prompt_tokens: int
    generation_tokens: float
    completed_requests: int


@dataclass(frozen=True, slots=True)
class LatencyCell:
    """Nearest-rank percentiles of one model at one concurrency level, in milliseconds."""

    requests: int
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    tpot_ms_p50: float | None
    tpot_ms_p99: float | None


def _merged_values(incoming: Any) -> dict[str, Any]:
    """SET clause: sums add; `running` is a sample, so only a row that carries one sets it.

    Replicas sharing one database each sample their own in-flight requests once per window, so adding
    the samples (rather than overwriting) gives the model's total running count there too.
    """
    t = throughput_windows.c
    return {
        "running": case((incoming.running.is_(None), t.running),
                        else_=func.coalesce(t.running, 0) + incoming.running),
        "prompt_tokens": t.prompt_tokens + incoming.prompt_tokens,
        "generation_tokens": t.generation_tokens + incoming.generation_tokens,
        "completed_requests": t.completed_requests + incoming.completed_requests,
    }


async def upsert_windows(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Add `rows` into their windows, creating the windows that do not exist yet."""
    if not rows:
        return
    dialect = conn.dialect.name
    if dialect not in _UPSERTS:
        raise StoreError(f"live throughput windows need SQLite or Postgres, not {dialect}")
    insert = _UPSERTS[dialect](throughput_windows)
    stmt = insert.on_conflict_do_update(index_elements=list(_KEY), set_=_merged_values(insert.excluded))
    await conn.execute(stmt, list(rows))


def _time_conditions(column: Any, since: float | None, until: float | None) -> list[ColumnElement[bool]]:
    conds: list[ColumnElement[bool]] = []
    if since is not None:
        conds.append(column >= since)
    if until is not None:
        conds.append(column < until)
    return conds


async def read_windows(
    conn: AsyncConnection, *, model: str | None, since: float | None, until: float | None
) -> Iterable[WindowRow]:
    """Sampled windows in time order per model; a window not sampled yet (still open) is left out."""
    t = throughput_windows.c
    conds = [t.running.is_not(None), *_time_conditions(t.window_start, since, until)]
    if model is not None:
        conds.append(t.model == model)
    stmt = (select(t.model, t.window_start, t.seconds, t.running, t.prompt_tokens, t.generation_tokens,
                   t.completed_requests).where(*conds).order_by(t.model, t.window_start))
    result = await conn.stream(stmt)
    return [WindowRow(*row) async for row in result]


def _percentile_rank(n: Any, percent: int) -> Any:
    # Nearest rank, ceil(p * n), in integer arithmetic so SQLite needs no math functions.
    return (n * percent + 99) // 100


def _percentiles(value: ColumnElement[Any], conds: Sequence[ColumnElement[bool]]) -> Any:
    r = requests.c
    group = (r.model, r.concurrency)
    ranked = (
        select(r.model, r.concurrency, value.label("v"),
               func.row_number().over(partition_by=group, order_by=value).label("rn"),
               func.count().over(partition_by=group).label("n"))
        .where(*conds, value.is_not(None))
        .subquery()
    )
    q = ranked.c
    return (
        select(q.model, q.concurrency, func.max(q.n),
               func.max(case((q.rn == _percentile_rank(q.n, 50), q.v))),
               func.max(case((q.rn == _percentile_rank(q.n, 99), q.v))))
        .group_by(q.model, q.concurrency)
    )


async def latency_percentiles(
    conn: AsyncConnection, *, model: str | None, since: float | None, until: float | None
) -> dict[str, dict[int, LatencyCell]]:
    """model -> concurrency at the request's start -> TTFT and time per output token, p50 and p99.

    Only streamed requests that ended well count: for a whole (non-streamed) answer the first token
    arrives with the last, so its TTFT is its duration and its time per output token is meaningless.
    """
    r = requests.c
    conds: list[ColumnElement[bool]] = [r.stream.is_(True), r.outcome == "ok", r.ttft_ms.is_not(None),
                                        *_time_conditions(r.started_at, since, until)]
    if model is not None:
        conds.append(r.model == model)
    tpot = case((and_(r.completion_tokens > 1, r.duration_ms >= r.ttft_ms),
                 (r.duration_ms - r.ttft_ms) / cast(r.completion_tokens - 1, Float)))
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for name, value in (("ttft", r.ttft_ms), ("tpot", tpot)):
        for row_model, level, n, p50, p99 in await conn.execute(_percentiles(value, conds)):
            cell = found.setdefault((row_model, int(level)), {"requests": 0})
            if name == "ttft":
                cell["requests"] = int(n)
            cell[f"{name}_ms_p50"] = None if p50 is None else float(p50)
            cell[f"{name}_ms_p99"] = None if p99 is None else float(p99)
    out: dict[str, dict[int, LatencyCell]] = {}
    for (row_model, level), cell in sorted(found.items()):
        out.setdefault(row_model, {})[level] = LatencyCell(
            requests=cell["requests"],
            ttft_ms_p50=cell.get("ttft_ms_p50"), ttft_ms_p99=cell.get("ttft_ms_p99"),
            tpot_ms_p50=cell.get("tpot_ms_p50"), tpot_ms_p99=cell.get("tpot_ms_p99"),
        )
    return out
