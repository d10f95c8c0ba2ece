"""SQL of the live throughput windows: the additive upsert the ticker issues, and the reads behind the tables.

Kept apart from `proxy.store.queries` (the compliance statistics) because nothing else reads or writes
`throughput_windows`; the request-latency percentiles come from the stats' hourly latency bins
(`proxy.store.figures.latency_bins`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, case, func, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement

from proxy.store import figures
from proxy.store.dialect import upsert_add
from proxy.store.latency_sketch import percentile
from proxy.store.queries import Filters
from proxy.store.tables import throughput_windows

__all__ = ["LatencyCell", "WindowRow", "latency_percentiles", "read_windows", "upsert_windows"]


@dataclass(frozen=True, slots=True)
class WindowRow:
    model: str
    window_start: float
    seconds: float
    running: int
    prompt_tokens: int
    generation_tokens: float
    completed_requests: int


@dataclass(kw_only=True, frozen=True, slots=True)
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
    await conn.execute(upsert_add(conn, throughput_windows, _merged_values), list(rows))


def upsert_windows_sync(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """`upsert_windows` in a transaction of the store writer's lane (`StoreWriter.transaction`)."""
    if rows:
        conn.execute(upsert_add(conn, throughput_windows, _merged_values), list(rows))


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


async def latency_percentiles(
    conn: AsyncConnection, *, model: str | None, since: float | None, until: float | None
) -> dict[str, dict[int, LatencyCell]]:
    """model -> concurrency at the request's start -> TTFT and time per output token, p50 and p99.

    Only streamed requests that ended well count: for a whole (non-streamed) answer the first token
    arrives with the last, so its TTFT is its duration and its time per output token is meaningless.
    The values come binned from the hourly rollups (exact where sparse, within 1% where dense).
    """
    found = await figures.latency_bins(conn, Filters(since=since, until=until, model=model))
    out: dict[str, dict[int, LatencyCell]] = {}
    for (row_model, level), kinds in sorted(found.items()):
        ttft, tpot = kinds.get("ttft", {}), kinds.get("tpot", {})
        out.setdefault(row_model, {})[level] = LatencyCell(
            requests=sum(b.count for b in ttft.values()),
            ttft_ms_p50=percentile(ttft, 50), ttft_ms_p99=percentile(ttft, 99),
            tpot_ms_p50=percentile(tpot, 50), tpot_ms_p99=percentile(tpot, 99),
        )
    return out
