"""Feedback experiments: per feedback variant (and model), how the sessions that read it fared.

- `recovery_rate`: of the error calls followed by another call of their session, the share followed by an
  allowed one (the same definition as `/stats/models`), with its Wilson interval;
- `loop_rate`: of the error runs (consecutive same-shape errors), the share that became retry-variant loops
  (`loop_min_attempts` or more), with its Wilson interval;
- `median_attempts`: of the error runs that ended in an allowed call, the median number of calls until and
  including that allowed call (1 rejection then success = 2), with a bootstrap interval.
Sessions get their variant at random (proxy/policy/feedback/variants.py), so the variants' figures compare fairly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from itertools import groupby
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.policy.verdict import is_error
from proxy.stats.confidence import bootstrap_median, median, wilson
from proxy.store import queries
from proxy.store.queries import Filters

__all__ = ["summarize_variant", "variant_stats"]


def _interval(bounds: tuple[float, float] | None) -> list[float] | None:
    return None if bounds is None else [round(bounds[0], 4), round(bounds[1], 4)]


def summarize_variant(sessions: Iterable[list[dict[str, Any]]], loop_min_attempts: int) -> dict[str, Any]:
    """The figures of one variant from its sessions' calls (each a list in session order)."""
    n_sessions = followed = recovered = runs = loops = 0
    to_allowed: list[int] = []
    for calls in sessions:
        n_sessions += 1
        run_shape: str | None = None
        run_length = 0
        for k, call in enumerate(calls):
            error = is_error(call["decision"])
            if error:
                if k + 1 < len(calls):
                    followed += 1
                    recovered += calls[k + 1]["decision"] == "allow"
                if call["shape_key"] == run_shape:
                    run_length += 1
                    continue
                if run_length:
                    runs, loops = runs + 1, loops + (run_length >= loop_min_attempts)
                run_shape, run_length = call["shape_key"], 1
            else:
                if run_length:
                    runs, loops = runs + 1, loops + (run_length >= loop_min_attempts)
                    if call["decision"] == "allow":
                        to_allowed.append(run_length + 1)
                run_shape, run_length = None, 0
        if run_length:
            runs, loops = runs + 1, loops + (run_length >= loop_min_attempts)
    return {
        "sessions": n_sessions,
        "recovery_rate": recovered / followed if followed else None,
        "recovery_rate_ci95": _interval(wilson(recovered, followed)),
        "error_runs": runs,
        "loop_rate": loops / runs if runs else None,
        "loop_rate_ci95": _interval(wilson(loops, runs)),
        "median_attempts": median(to_allowed),
        "median_attempts_ci95": _interval(bootstrap_median(to_allowed)),
    }


async def variant_stats(engine: AsyncEngine, *, since: float | None = None, until: float | None = None,
                        model: str | None = None, policy: str | None = None,
                        loop_min_attempts: int = 3) -> dict[str, Any]:
    """`GET /stats/variants`: one entry per (model, variant) of the sessions in a feedback experiment."""
    f = Filters(since=since, until=until, model=model, policy=policy)
    async with engine.connect() as conn:
        rows = await queries.variant_calls(conn, f)
    groups: dict[tuple[str, str], list[list[dict[str, Any]]]] = {}
    for _, calls in groupby(rows, key=lambda r: r["session_id"]):
        session = list(calls)
        groups.setdefault((session[0]["model"], session[0]["feedback_variant"]), []).append(session)
    # The bootstrap medians are CPU work: in a thread, off the event loop that relays streams (see models.py).
    variants = await asyncio.to_thread(lambda: [{"model": m, "variant": v, **summarize_variant(s, loop_min_attempts)}
                                                for (m, v), s in sorted(groups.items())])
    return {"window": {"since": since, "until": until}, "variants": variants}
