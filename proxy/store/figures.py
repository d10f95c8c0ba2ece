"""The figures of `/stats/models`, read from the hourly rollups with the rows at a window's edges.

A window [since, until) is split into the whole hours inside it, summed from the rollup tables
(`proxy.store.rollups`), and at most two partial hours at its ends, computed from the rows themselves by the
plain SQL of `proxy.store.queries`. The two add up to the same figures the rows would give (distinct sessions
are a COUNT(DISTINCT) over the union of both sides, latency percentiles merge bins), so a window of any
length costs the rollup rows of its hours plus at most two hours of rows. Loops and recovery come from the
sessions' error runs (`proxy.store.runs`), selected by their first call. The whole store unfiltered (every
hour: the dashboard's default) reads its per-session units and latency bins from the all-time totals
(`proxy.store.totals`) instead of summing every hour's rows per session.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Float, and_, case, cast, func, literal, null, select, tuple_, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.store import queries
from proxy.store.latency_sketch import Bin, bin_of, merge_bin
from proxy.store.queries import CallCounts, Filters, LoopSummary, RequestCounts, SessionErrors, SessionRecovery
from proxy.store.rollups import BUCKET_SECONDS, latency_values
from proxy.store.runs import followed_sql, recovered_sql
from proxy.store.tables import (
    error_runs,
    requests,
    stats_calls,
    stats_latency,
    stats_latency_totals,
    stats_reasons,
    stats_requests,
    stats_session_calls,
    stats_session_totals,
    stats_sessions,
    tool_calls,
)
from proxy.store.verdict_sql import is_error_sql

__all__ = [
    "Split",
    "attempt_histograms",
    "call_counts",
    "latency_bins",
    "longest_loops",
    "loop_calls",
    "primary_reason_counts",
    "reason_counts",
    "request_counts",
    "sequence_stats",
    "session_error_counts",
    "session_recoveries",
    "split",
    "throughput_by_concurrency",
    "whole_store",
]


@dataclass(frozen=True, slots=True)
class Split:
    """The whole hours of a window, [first, end) with None for unbounded (or no hours at all), and the
    windows of rows left at its edges."""

    hours: tuple[float | None, float | None] | None
    edges: tuple[Filters, ...]


def split(f: Filters) -> Split:
    first = None if f.since is None else math.ceil(f.since / BUCKET_SECONDS) * BUCKET_SECONDS
    end = None if f.until is None else math.floor(f.until / BUCKET_SECONDS) * BUCKET_SECONDS
    if first is not None and end is not None and first >= end:
        return Split(None, (f,))  # within one hour, or across one boundary: rows only
    edges = []
    if first is not None and f.since is not None and f.since < first:
        edges.append(replace(f, until=first))
    if end is not None and f.until is not None and end < f.until:
        edges.append(replace(f, since=end))
    return Split((first, end), tuple(edges))


def whole_store(f: Filters) -> bool:
    """A window of every hour and no filter but the model's: the all-time totals have its figures
    (proxy/store/totals.py)."""
    return f.since is None and f.until is None and f.policy is None and f.route is None


def _model_condition(f: Filters, columns: Any) -> list[Any]:
    return [] if f.model is None else [columns.model == f.model]


def _rollup_conditions(f: Filters, hours: tuple[float | None, float | None], table: Any) -> list[Any]:
    t = table.c
    first, end = hours
    conds: list[Any] = []
    if first is not None:
        conds.append(t.bucket >= first)
    if end is not None:
        conds.append(t.bucket < end)
    if f.model is not None:
        conds.append(t.model == f.model)
    if f.policy is not None and "policy_name" in t:
        conds.append(t.policy_name == f.policy)
    if f.route is not None and "route" in t:
        conds.append(t.route == f.route)
    return conds


def _add_counts(into: dict[str, dict[Any, int]], found: dict[str, dict[Any, int]]) -> None:
    for model, counts in found.items():
        mine = into.setdefault(model, {})
        for key, n in counts.items():
            mine[key] = mine.get(key, 0) + n


# --- counts -------------------------------------------------------------------------------------------------

async def call_counts(conn: AsyncConnection, f: Filters) -> dict[str, CallCounts]:
    """model -> its tool calls and errors."""
    parts = split(f)
    out: dict[str, CallCounts] = {}
    if parts.hours is not None:
        c = stats_calls.c
        errors = func.sum(case((is_error_sql(c.decision), c.n), else_=0))
        stmt = (select(c.model, func.sum(c.n), errors)
                .where(*_rollup_conditions(f, parts.hours, stats_calls)).group_by(c.model))
        out = {m: CallCounts(calls=int(n), errors=int(e or 0)) for m, n, e in await conn.execute(stmt)}
    for edge in parts.edges:
        for model, found in (await queries.call_counts_from_rows(conn, edge)).items():
            mine = out.get(model, CallCounts())
            out[model] = CallCounts(calls=mine.calls + found.calls, errors=mine.errors + found.errors)
    return out


async def _counts_by_key(
    conn: AsyncConnection, f: Filters, table: Any, key: str,
    rows: Callable[[AsyncConnection, Filters], Awaitable[dict[str, dict[Any, int]]]], *conds: Any,
) -> dict[str, dict[Any, int]]:
    """model -> {key: count}: the rollup `table`'s whole hours, grouped by its column `key`, plus what the
    `rows` query gives for the window's edges."""
    parts = split(f)
    out: dict[str, dict[Any, int]] = {}
    if parts.hours is not None:
        c = table.c
        stmt = (select(c.model, c[key], func.sum(c.n))
                .where(*conds, *_rollup_conditions(f, parts.hours, table)).group_by(c.model, c[key]))
        for model, value, n in await conn.execute(stmt):
            out.setdefault(model, {})[value] = int(n)
    for edge in parts.edges:
        _add_counts(out, await rows(conn, edge))
    return out


async def primary_reason_counts(conn: AsyncConnection, f: Filters) -> dict[str, dict[str, int]]:
    """model -> {primary reason: error calls led by it}."""
    return await _counts_by_key(conn, f, stats_calls, "primary_reason", queries.primary_reason_counts_from_rows,
                                is_error_sql(stats_calls.c.decision))


async def reason_counts(conn: AsyncConnection, f: Filters) -> dict[str, dict[str, int]]:
    """model -> {reason code: calls carrying it}."""
    return await _counts_by_key(conn, f, stats_reasons, "reason", queries.reason_counts_from_rows)


async def request_counts(conn: AsyncConnection, f: Filters) -> dict[str, RequestCounts]:
    """model -> its requests and the distinct sessions among them."""
    parts = split(f)
    counts: dict[str, int] = {}
    sides = []
    if parts.hours is not None:
        c = stats_requests.c
        stmt = (select(c.model, func.sum(c.n))
                .where(*_rollup_conditions(f, parts.hours, stats_requests)).group_by(c.model))
        counts = {m: int(n) for m, n in await conn.execute(stmt)}
        s = stats_sessions.c
        sides.append(select(s.model, s.session_id).where(*_rollup_conditions(f, parts.hours, stats_sessions)))
    r = requests.c
    for edge in parts.edges:
        # Only the count here: the edge's sessions join the union below, not a distinct count of their own.
        stmt = select(r.model, func.count()).where(*queries.request_conditions(edge)).group_by(r.model)
        for model, n in await conn.execute(stmt):
            counts[model] = counts.get(model, 0) + int(n)
        sides.append(select(r.model, r.session_id).where(*queries.request_conditions(edge)))
    both = union_all(*sides).subquery("seen") if len(sides) > 1 else sides[0].subquery("seen")
    stmt = select(both.c.model, func.count(both.c.session_id.distinct())).group_by(both.c.model)
    sessions = {m: int(n) for m, n in await conn.execute(stmt)}
    return {m: RequestCounts(requests=n, sessions=sessions.get(m, 0)) for m, n in counts.items()}


async def session_error_counts(conn: AsyncConnection, f: Filters) -> dict[str, list[SessionErrors]]:
    """model -> errors and tool calls of each session with calls in the window, in ascending order.

    The sessions are summed and then counted by their (errors, calls) in the database: a million calls make
    tens of thousands of sessions but only a few hundred distinct pairs, so what crosses into Python (and the
    event loop) stays small. The list holds one pair per session all the same, as the bootstrap resamples it.
    """
    if whole_store(f):
        t = stats_session_totals.c
        return await _pair_counts(conn, select(t.model, t.errors, t.calls).where(
            t.calls > 0, *_model_condition(f, t)).subquery("per_session"), "errors", "calls", SessionErrors)
    parts = split(f)
    sides = []
    if parts.hours is not None:
        c = stats_session_calls.c
        sides.append(select(c.model, c.session_id, c.errors.label("errors"), c.calls.label("calls"))
                     .where(*_rollup_conditions(f, parts.hours, stats_session_calls)))
    t = tool_calls.c
    for edge in parts.edges:
        sides.append(select(t.model, t.session_id, case((is_error_sql(t.decision), 1), else_=0).label("errors"),
                            literal(1).label("calls")).where(*queries.call_conditions(edge)))
    both = union_all(*sides).subquery("parts") if len(sides) > 1 else sides[0].subquery("parts")
    per_session = (select(both.c.model, func.sum(both.c.errors).label("errors"), func.sum(both.c.calls).label("calls"))
                   .group_by(both.c.session_id, both.c.model).subquery("per_session"))
    return await _pair_counts(conn, per_session, "errors", "calls", SessionErrors)


async def _yielding(rows: Iterable[Any], every: int = 500) -> AsyncIterator[Any]:
    """`rows` with a turn of the event loop after each `every`: a long result read on the loop (a row each
    ~1 us) would otherwise hold every relayed stream for its whole length."""
    for position, row in enumerate(rows, 1):
        yield row
        if position % every == 0:
            await asyncio.sleep(0)


async def _pair_counts(conn: AsyncConnection, per_session: Any, part: str, whole: str,
                       unit: Callable[[int, int], Any]) -> dict[str, list[Any]]:
    """model -> one `unit(part, whole)` per session of `per_session` (a subquery of model, part, whole), in
    ascending order, from the database's count of each distinct pair."""
    s = per_session.c
    stmt = (select(s.model, s[part], s[whole], func.count())
            .group_by(s.model, s[part], s[whole]).order_by(s.model, s[part], s[whole]))
    out: dict[str, list[Any]] = {}
    async for model, p, w, n in _yielding(await conn.execute(stmt)):
        out.setdefault(model, []).extend([unit(int(p or 0), int(w or 0))] * int(n))
    return out


async def attempt_histograms(conn: AsyncConnection, f: Filters) -> dict[str, dict[int, int]]:
    """model -> {upstream attempts: requests}."""
    found = await _counts_by_key(conn, f, stats_requests, "attempts", queries.attempt_histograms_from_rows)
    return {m: {int(k): n for k, n in h.items()} for m, h in found.items()}


async def throughput_by_concurrency(conn: AsyncConnection, f: Filters) -> dict[str, list[dict[str, Any]]]:
    """model -> per concurrency level: requests, mean completion tokens/s, mean time to first token."""
    parts = split(f)
    sums: dict[tuple[str, int], list[float]] = {}  # requests, rate sum, rates, ttft sum, ttfts
    statements = []
    if parts.hours is not None:
        c = stats_requests.c
        statements.append(
            select(c.model, c.concurrency, func.sum(c.n), func.sum(c.rate_sum), func.sum(c.rate_n),
                   func.sum(c.ttft_sum), func.sum(c.ttft_n))
            .where(*_rollup_conditions(f, parts.hours, stats_requests)).group_by(c.model, c.concurrency))
    r = requests.c
    rate = case((and_(r.completion_tokens.is_not(None), r.duration_ms > 0),
                 cast(r.completion_tokens, Float) * 1000.0 / r.duration_ms), else_=null())
    for edge in parts.edges:
        statements.append(
            select(r.model, r.concurrency, func.count(), func.sum(rate), func.count(rate),
                   func.sum(r.ttft_ms), func.count(r.ttft_ms))
            .where(*queries.request_conditions(edge)).group_by(r.model, r.concurrency))
    for stmt in statements:
        for model, level, *values in await conn.execute(stmt):
            mine = sums.setdefault((model, int(level)), [0.0] * 5)
            for i, v in enumerate(values):
                mine[i] += float(v or 0)
    out: dict[str, list[dict[str, Any]]] = {}
    for (model, level), (n, rate_sum, rate_n, ttft_sum, ttft_n) in sorted(sums.items()):
        out.setdefault(model, []).append({
            "concurrency": level, "requests": int(n),
            "completion_tokens_per_s": rate_sum / rate_n if rate_n else None,
            "ttft_ms": ttft_sum / ttft_n if ttft_n else None,
        })
    return out


async def latency_bins(
    conn: AsyncConnection, f: Filters
) -> dict[tuple[str, int], dict[str, dict[int, Bin]]]:
    """(model, concurrency) -> {"ttft" | "tpot": latency bins} of the streamed requests that ended well."""
    out: dict[tuple[str, int], dict[str, dict[int, Bin]]] = {}
    if whole_store(f):
        t = stats_latency_totals.c
        stmt = select(t.model, t.concurrency, t.kind, t.bin, t.n, t.low, t.high).where(*_model_condition(f, t))
        async for model, level, kind, index, n, low, high in _yielding(await conn.execute(stmt)):
            out.setdefault((model, int(level)), {}).setdefault(kind, {})[int(index)] = Bin(int(n), low, high)
        return out
    parts = split(f)
    if parts.hours is not None:
        c = stats_latency.c
        stmt = (select(c.model, c.concurrency, c.kind, c.bin, func.sum(c.n), func.min(c.low), func.max(c.high))
                .where(*_rollup_conditions(f, parts.hours, stats_latency))
                .group_by(c.model, c.concurrency, c.kind, c.bin))
        async for model, level, kind, index, n, low, high in _yielding(await conn.execute(stmt)):
            merge_bin(out.setdefault((model, int(level)), {}).setdefault(kind, {}), int(index), int(n), low, high)
    r = requests.c
    for edge in parts.edges:
        stmt = (select(r.model, r.concurrency, r.stream, r.outcome, r.ttft_ms, r.duration_ms, r.completion_tokens)
                .where(r.stream.is_(True), r.outcome == "ok", r.ttft_ms.is_not(None),
                       *queries.request_conditions(edge)))
        async for row in _yielding(await conn.execute(stmt)):
            cell = out.setdefault((row.model, int(row.concurrency)), {})
            for kind, value in zip(("ttft", "tpot"), latency_values(row._mapping), strict=True):
                if value is not None:
                    merge_bin(cell.setdefault(kind, {}), bin_of(value), 1, value, value)
    return out


# --- loops and recovery -----------------------------------------------------------------------------------

def _run_conditions(f: Filters) -> list[Any]:
    e = error_runs.c
    return queries.conditions(f, e.start_at, e.policy_name, e.model, e.route)


async def sequence_stats(conn: AsyncConnection, f: Filters, min_attempts: int) -> dict[str, LoopSummary]:
    """model -> loops and recovery, over the error runs that start in the window."""
    e = error_runs.c
    is_loop = e.attempts >= min_attempts
    stmt = select(
        e.model,
        followed_sql(),
        recovered_sql(),
        func.sum(case((is_loop, 1), else_=0)),
        func.max(case((is_loop, e.attempts), else_=0)),
        func.sum(case((is_loop, e.attempts), else_=0)),
        func.sum(case((and_(is_loop, e.exact), 1), else_=0)),
    ).where(*_run_conditions(f)).group_by(e.model)
    return {
        model: LoopSummary(count=int(n or 0), max_attempts=int(longest or 0), total_attempts=int(total or 0),
                           exact_repeats=int(exact or 0), followed=int(followed or 0),
                           recovered=int(recovered or 0))
        for model, followed, recovered, n, longest, total, exact in await conn.execute(stmt)
    }


async def session_recoveries(conn: AsyncConnection, f: Filters) -> dict[str, list[SessionRecovery]]:
    """model -> recovered and followed error calls of each session, over its error runs that start in the
    window, in ascending order (counted by distinct pair in the database, as `session_error_counts`)."""
    if whole_store(f):
        t = stats_session_totals.c
        per_session = select(t.model, t.recovered, t.followed).where(
            t.followed.is_not(None), *_model_condition(f, t)).subquery("per_session")
    else:
        e = error_runs.c
        per_session = (select(e.model, recovered_sql().label("recovered"), followed_sql().label("followed"))
                       .where(*_run_conditions(f)).group_by(e.session_id, e.model).subquery("per_session"))
    return await _pair_counts(conn, per_session, "recovered", "followed", SessionRecovery)


async def longest_loops(
    conn: AsyncConnection, f: Filters, min_attempts: int, limit: int
) -> list[dict[str, Any]]:
    """The longest loops (newest first among equals), without their calls."""
    e = error_runs.c
    stmt = (select(e.session_id, e.start_at, e.start_index, e.end_at, e.end_index, e.model, e.shape,
                   e.attempts, e.exact)
            .where(e.attempts >= min_attempts, *_run_conditions(f))
            .order_by(e.attempts.desc(), e.start_at.desc(), e.session_id)
            .limit(limit))
    return [dict(row._mapping) for row in await conn.execute(stmt)]


async def loop_calls(conn: AsyncConnection, loops: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls of the given loops (rows of `longest_loops`) in order, each with its loop's session and start."""
    if not loops:
        return []
    t = tool_calls.c
    key = tuple_(t.created_at, t.call_index)
    branches = [
        select(literal(i).label("loop"), t.id, t.created_at, t.call_index,
               func.coalesce(t.command, t.arguments_raw).label("cmd_key"))
        .where(t.session_id == lp["session_id"],
               key >= tuple_(literal(lp["start_at"]), literal(lp["start_index"])),
               key <= tuple_(literal(lp["end_at"]), literal(lp["end_index"])))
        for i, lp in enumerate(loops)
    ]
    both = union_all(*branches).subquery("calls") if len(branches) > 1 else branches[0].subquery("calls")
    stmt = select(both).order_by(both.c.loop, both.c.created_at, both.c.call_index)
    return [dict(row._mapping) for row in await conn.execute(stmt)]

