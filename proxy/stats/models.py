"""Per-model statistics from the store, as the API, the dashboard and the CLI show them.

The figures are computed by the providers `proxy.stats.providers` declares; this module puts them into
DESIGN.md's JSON shape (`GET /stats/models`, `model_entry`), declares the dashboard's per-model columns
(`MODEL_COLUMNS`) and renders the seed's tables as aligned text or Markdown.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.policy.verdict import is_error, loop_key
from proxy.stats.confidence import bootstrap_ratio, wilson
from proxy.stats.providers import ModelFigures, gather
from proxy.store import figures, queries
from proxy.store.queries import Filters
from proxy.throughput.live import empty_throughput, live_throughput

__all__ = [
    "MODEL_COLUMNS",
    "Column",
    "loops_table",
    "median_from_histogram",
    "model_entry",
    "model_stats",
    "parse_time",
    "reasons_table",
    "render_table",
    "seed_table",
    "session_detail",
    "top_loops",
    "turns_table",
]

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(value: str | float | None, *, now: float | None = None) -> float | None:
    """Epoch seconds from epoch seconds, ISO 8601 (naive means UTC), or a duration ago like `24h`, `7d`."""
    if value is None or isinstance(value, int | float):
        return None if value is None else float(value)
    text = value.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    if match := _DURATION.match(text):
        ago = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        return (time.time() if now is None else now) - ago
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"expected epoch seconds, ISO 8601 or a duration like 24h (got {value!r})"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def median_from_histogram(histogram: Mapping[int, int]) -> float | None:
    """The median of values given as {value: how many}; the mean of the two middle ones for an even count."""
    total = sum(histogram.values())
    if total == 0:
        return None
    middle = ((total - 1) // 2, total // 2)  # zero-based ranks of the middle value(s)
    found: list[int] = []
    seen = 0
    for value in sorted(histogram):
        count = histogram[value]
        for rank in middle:
            if seen <= rank < seen + count:
                found.append(value)
        seen += count
    return (found[0] + found[1]) / 2


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _interval(bounds: tuple[float, float] | None) -> list[float] | None:
    """An interval as the JSON carries it: `[low, high]` rounded to 4 places, or null without data."""
    return None if bounds is None else [round(bounds[0], 4), round(bounds[1], 4)]


def _by_count(counts: Mapping[str, int]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def model_entry(name: str, m: ModelFigures, live: Mapping[str, Any] | None) -> dict[str, Any]:
    """One model's object in `GET /stats/models`, from its figures and its live throughput windows."""
    return {
        "model": name,
        "sessions": m.requests.sessions,
        "requests": m.requests.requests,
        "tool_calls": m.calls.calls,
        "errors": m.calls.errors,
        "error_rate": _rate(m.calls.errors, m.calls.calls),
        "error_rate_ci95": _interval(wilson(m.calls.errors, m.calls.calls)),
        "error_rate_session_ci95": _interval(bootstrap_ratio(m.session_errors)),
        "reasons": _by_count(m.reasons),
        "primary_reasons": _by_count(m.primary_reasons),
        "loops": {
            "count": m.loops.count,
            "max_attempts": m.loops.max_attempts,
            "mean_attempts": m.loops.total_attempts / m.loops.count if m.loops.count else None,
            "exact_repeats": m.loops.exact_repeats,
        },
        "recovery_rate": _rate(m.loops.recovered, m.loops.followed),
        "recovery_rate_ci95": _interval(wilson(m.loops.recovered, m.loops.followed)),
        "recovery_rate_session_ci95": _interval(bootstrap_ratio(m.session_recoveries)),
        "median_attempts": median_from_histogram(m.attempts),
        "ungoverned_text_actions": m.ungoverned_text,
        "blocked_turns": m.failed.blocked,
        "blocked_rate": _rate(m.failed.blocked, m.requests.requests),
        "upstream_errors": m.failed.upstream_errors,
        "secrets_redacted": _by_count(m.secrets_redacted),
        "throughput": {**(live or empty_throughput()), "by_concurrency": m.throughput},
    }


@dataclass(frozen=True, slots=True)
class Column:
    """A column of the dashboard's per-model table: its header, where its value is in a `model_entry`
    object (keys joined by dots), and how the page shows the value."""

    header: str
    path: str
    format: Literal["text", "count", "percent"] = "count"


# The dashboard's per-model table, left to right; the page reads it from `GET /dashboard/columns.json`.
MODEL_COLUMNS: tuple[Column, ...] = (
    Column("Model", "model", "text"),
    Column("Sessions", "sessions"),
    Column("Requests", "requests"),
    Column("Tool calls", "tool_calls"),
    Column("Errors", "errors"),
    Column("Err/tool", "error_rate", "percent"),
    Column("Loops", "loops.count"),
    Column("Recovery", "recovery_rate", "percent"),
    Column("Ungoverned", "ungoverned_text_actions"),
)


async def model_stats(
    engine: AsyncEngine,
    *,
    since: float | None = None,
    until: float | None = None,
    policy: str | None = None,
    model: str | None = None,
    route: str | None = None,
    loop_min_attempts: int = 3,
) -> dict[str, Any]:
    """DESIGN.md's `GET /stats/models` object for the calls and requests the filters select."""
    f = Filters(since=since, until=until, policy=policy, model=model, route=route)
    async with engine.connect() as conn:
        found = await gather(conn, f, loop_min_attempts=loop_min_attempts)
    live = await live_throughput(engine, model=model, since=since, until=until)
    # The session bootstraps are CPU work (up to confidence.MAX_WORK resamples a figure): in a thread, so that
    # a stats request never stalls the streams this process relays.
    models = await asyncio.to_thread(
        lambda: [model_entry(name, figures_of, live.get(name)) for name, figures_of in found.items()])
    return {"window": {"since": since, "until": until}, "models": models}


async def session_detail(
    engine: AsyncEngine, session_id: str, *, loop_min_attempts: int = 3
) -> dict[str, Any] | None:
    """The session's calls in order with verdicts and loop membership; None when the store never saw it."""
    async with engine.connect() as conn:
        rows = await queries.session_calls(conn, session_id)
        if not rows and not await queries.session_exists(conn, session_id):
            return None
        n_requests = await queries.session_request_count(conn, session_id)
        profiles = await queries.session_profiles(conn, session_id)
        roots = await queries.session_project_roots(conn, session_id)
        request_rows = await queries.session_requests(conn, session_id)
        own = await queries.session_row(conn, session_id)
        redactions = await queries.session_redactions(conn, session_id)
    loop_numbers: dict[int, int] = {}  # run number -> loop number, in order of the loops' first calls
    loops: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for row in rows:
        loop = None
        if row["run_no"] is not None and row["run_length"] >= loop_min_attempts:
            number = loop_numbers.setdefault(row["run_no"], len(loop_numbers) + 1)
            if number > len(loops):
                shape = loop_key(row["shape"], row["primary_reason"], row["decision"])
                loops.append({"number": number, "shape": shape, "attempts": row["run_length"],
                              "commands": [], "started_at": row["created_at"]})
            loops[number - 1]["commands"].append(row["command"] or row["arguments_raw"])
            loops[number - 1]["ended_at"] = row["created_at"]
            loop = {"number": number, "position": row["run_position"], "attempts": row["run_length"]}
        calls.append({
            "id": row["id"], "request_id": row["request_id"], "created_at": row["created_at"],
            "model": row["model"], "route": row["route"], "attempt": row["attempt"],
            "call_index": row["call_index"], "tool_name": row["tool_name"], "command": row["command"],
            "arguments": row["arguments_raw"], "decision": row["decision"],
            "reasons": [r for r in (row["reasons"] or "").split(",") if r],
            "shape": row["shape"], "policy_name": row["policy_name"], "policy_hash": row["policy_hash"],
            "mode": row["mode"],
            "delivered": bool(row["delivered"]), "repaired_command": row["repaired_command"],
            "feedback_variant": row["feedback_variant"], "loop": loop,
        })
    for item in loops:
        item["exact_repeat"] = len(set(item["commands"])) == 1
    return {
        "session_id": session_id,
        "models": sorted({c["model"] for c in calls}),
        "requests": n_requests,
        "profiles": profiles,
        # Learned from the client-written part of the requests (issue 25), or pinned by the operator.
        "project_root": own.get("project_root") or (roots[-1] if roots else None),
        "project_roots": roots,
        "source": own.get("source"),
        "request_list": [{**r, "stream": bool(r["stream"]), "budget_exhausted": bool(r["budget_exhausted"])}
                         for r in request_rows],
        "tool_calls": len(calls),
        "errors": sum(is_error(c["decision"]) for c in calls),
        "loops": loops,
        "calls": calls,
        # Secrets replaced before the model saw them: per tool call and detection rule, never the secret.
        "secrets_redacted": redactions,
    }


async def top_loops(
    engine: AsyncEngine,
    *,
    limit: int = 20,
    since: float | None = None,
    until: float | None = None,
    model: str | None = None,
    loop_min_attempts: int = 3,
) -> list[dict[str, Any]]:
    """The longest retry-variant loops with the commands the model tried, longest first."""
    f = Filters(since=since, until=until, model=model)
    async with engine.connect() as conn:
        found = await figures.longest_loops(conn, f, loop_min_attempts, limit)
        calls = await figures.loop_calls(conn, found)
    commands: dict[int, list[str]] = {}
    for call in calls:
        commands.setdefault(call["loop"], []).append(call["cmd_key"])
    return [{
        "session_id": lp["session_id"], "model": lp["model"], "shape": lp["shape"],
        "attempts": int(lp["attempts"]), "exact_repeat": bool(lp["exact"]),
        "started_at": lp["start_at"], "ended_at": lp["end_at"],
        "commands": commands.get(i, []),
    } for i, lp in enumerate(found)]


# --- tables -------------------------------------------------------------------------------------------------

def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[bool],
                 markdown: bool = False) -> str:
    """Aligned text (`a | b`, dashed rule) or a Markdown table; `right[i]` right-aligns column i."""
    if markdown:
        rule = "|" + "|".join("---:" if r else "---" for r in right) + "|"
        lines = ["| " + " | ".join(headers) + " |", rule]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        cols = zip(cells, widths, right, strict=True)
        return " | ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in cols)

    out = [line(headers), "-+-".join("-" * w for w in widths)] + [line(row) for row in rows]
    return "\n".join(s.rstrip() for s in out)


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def _number(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:.{digits}f}"


def seed_table(stats: Mapping[str, Any], *, markdown: bool = False) -> str:
    """The seed's table: Model | Sessions | Tool calls | Errors | Err/tool."""
    rows = [[m["model"], str(m["sessions"]), str(m["tool_calls"]), str(m["errors"]),
             _percent(m["error_rate"])] for m in stats["models"]]
    return render_table(["Model", "Sessions", "Tool calls", "Errors", "Err/tool"], rows,
                        right=[False, True, True, True, True], markdown=markdown)


def turns_table(stats: Mapping[str, Any], *, markdown: bool = False) -> str:
    """Per model: requests, the turns the retry budget ended (blocked) and the requests the upstream failed."""
    rows = [[m["model"], str(m["requests"]), str(m["blocked_turns"]), _percent(m["blocked_rate"]),
             str(m["upstream_errors"])] for m in stats["models"]]
    return render_table(["Model", "Requests", "Blocked turns", "Blocked", "Upstream errors"], rows,
                        right=[False, True, True, True, True], markdown=markdown)


def reasons_table(stats: Mapping[str, Any], *, markdown: bool = False) -> str:
    """Reason codes down, models across: how many calls carried each code."""
    models = [m["model"] for m in stats["models"]]
    totals: dict[str, int] = {}
    for m in stats["models"]:
        for code, n in m["reasons"].items():
            totals[code] = totals.get(code, 0) + n
    rows = [[code, *(str(m["reasons"].get(code, 0)) for m in stats["models"])]
            for code in _by_count(totals)]
    return render_table(["Reason", *models], rows, right=[False] + [True] * len(models), markdown=markdown)


def loops_table(stats: Mapping[str, Any], *, markdown: bool = False) -> str:
    """Per model: retry-variant loops, their lengths, recovery after a refusal and attempts per request."""
    rows = [[
        m["model"], str(m["loops"]["count"]), str(m["loops"]["exact_repeats"]),
        _number(m["loops"]["max_attempts"] or None), _number(m["loops"]["mean_attempts"]),
        _percent(m["recovery_rate"]), _number(m["median_attempts"]),
    ] for m in stats["models"]]
    headers = ["Model", "Loops", "Exact repeats", "Longest", "Mean length", "Recovery", "Median attempts"]
    return render_table(headers, rows, right=[False] + [True] * 6, markdown=markdown)
