"""The figures of `GET /stats/overview` (proxy/http/stats_routes.py), what the dashboard needs beside
`/stats/models`: the error rate over time in the picked range, loops grouped by model and shape, blocked
turns and upstream errors per model."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from sqlalchemy import and_, case, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.errors import BadRequest
from proxy.store.dialect import backend_of
from proxy.store.tables import error_runs, requests, tool_calls
from proxy.store.verdict_sql import is_error_sql

__all__ = ["RANGES", "blocked_turns", "error_timeline", "loop_groups", "upstream_errors"]

# range name -> (seconds back from now, bucket seconds); "all" spans the store in about 60 buckets.
RANGES: dict[str, tuple[float | None, float]] = {
    "1h": (3600, 60), "24h": (86400, 1800), "7d": (7 * 86400, 3 * 3600), "all": (None, 0),
}
_SESSIONS_PER_GROUP = 20


async def error_timeline(engine: AsyncEngine, range_name: str, *, now: float | None = None) -> dict[str, Any]:
    """Per model and time bucket: tool calls, errors and the error rate, over the range ending now."""
    if range_name not in RANGES:
        raise BadRequest(f"range must be one of {', '.join(RANGES)} (got {range_name!r})", param="range")
    now = time.time() if now is None else now
    back, size = RANGES[range_name]
    t = tool_calls.c
    async with engine.connect() as conn:
        if back is None:
            first = (await conn.execute(select(func.min(t.created_at)))).scalar()
            since = float(first) if first is not None else now - 3600
            size = max(60.0, (now - since) / 60)
        else:
            since = now - back
        since = since - since % size  # whole buckets, aligned like the axis labels
        bucket = backend_of(engine).bucket_number(t.created_at, size).label("bucket")
        is_error = case((is_error_sql(t.decision), 1), else_=0)
        stmt = (select(t.model, bucket, func.count().label("calls"), func.sum(is_error).label("errors"))
                .where(t.created_at >= since, t.created_at <= now)
                .group_by(t.model, bucket).order_by(t.model, bucket))
        rows = (await conn.execute(stmt)).all()
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for model, number, calls, errors in rows:
        series[model].append({"start": number * size, "calls": int(calls), "errors": int(errors or 0),
                              "error_rate": int(errors or 0) / calls if calls else None})
    return {"range": range_name, "since": since, "until": now, "bucket_seconds": size, "models": dict(series)}


async def loop_groups(engine: AsyncEngine, *, min_attempts: int, since: float | None = None) -> list[dict[str, Any]]:
    """Loops grouped by model and shape: how many, a histogram of their lengths, and the newest sessions."""
    e = error_runs.c
    conditions = [e.attempts >= min_attempts]
    if since is not None:
        conditions.append(e.start_at >= since)
    async with engine.connect() as conn:
        lengths = (await conn.execute(
            select(e.model, e.shape, e.attempts, func.count()).where(and_(*conditions))
            .group_by(e.model, e.shape, e.attempts))).all()
        newest = (await conn.execute(
            select(e.model, e.shape, e.session_id, e.attempts, e.start_at).where(and_(*conditions))
            .order_by(e.start_at.desc()).limit(2000))).all()
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for model, shape, attempts, count in lengths:
        group = groups.setdefault((model, shape), {"model": model, "shape": shape, "loops": 0, "lengths": {},
                                                   "sessions": []})
        group["loops"] += int(count)
        group["lengths"][str(int(attempts))] = int(count)
    for model, shape, session, attempts, started in newest:
        known = groups.get((model, shape))
        if known is not None and len(known["sessions"]) < _SESSIONS_PER_GROUP:
            known["sessions"].append({"session_id": session, "attempts": int(attempts), "started_at": started})
    return sorted(groups.values(), key=lambda g: (-g["loops"], g["model"], g["shape"]))


async def blocked_turns(engine: AsyncEngine) -> dict[str, int]:
    r = requests.c
    async with engine.connect() as conn:
        rows = (await conn.execute(select(r.model, func.count()).where(r.budget_exhausted.is_(True))
                                   .group_by(r.model))).all()
    return {model: int(count) for model, count in rows}


async def upstream_errors(engine: AsyncEngine) -> dict[str, int]:
    """Requests answered with an upstream failure (502 unreachable or broken, 504, the upstream's own error)."""
    r = requests.c
    async with engine.connect() as conn:
        rows = (await conn.execute(select(r.model, func.count()).where(r.outcome == "upstream_error")
                                   .group_by(r.model))).all()
    return {model: int(count) for model, count in rows}
