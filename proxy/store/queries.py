"""The statistics as SQL over the store's rows: every figure is an aggregate the database computes.

Portable to SQLite and Postgres (SQLAlchemy Core, standard window functions and row values, no dialect
functions). Each function returns small per-model results; nothing here loads the store's rows into Python.
`proxy.store.figures` uses the counts for the partial hours at a window's edges, and the hourly rollups
for the rest.

One session's view marks its loops with gaps-and-islands over the session's calls in order (created_at,
call_index): an error call starts a run unless the call just before it is an error with the same shape and
model; a running SUM of the starts over the session's error calls numbers the runs; GROUP BY the run number
gives each run's length, and a run of at least `loop_min_attempts` is a loop. It finds the same runs as
`proxy.store.runs`, which keeps them for the store-wide figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import (
    and_,
    case,
    distinct,
    func,
    literal,
    literal_column,
    or_,
    select,
    tuple_,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.selectable import CTE

from proxy.store.tables import requests, secret_redactions, sessions, tool_call_reasons, tool_calls
from proxy.store.verdict_sql import is_error_sql, loop_key_sql

__all__ = [
    "FAILED_OUTCOMES",
    "CallCounts",
    "FailedTurns",
    "Filters",
    "LoopSummary",
    "RequestCounts",
    "SessionErrorRow",
    "SessionErrors",
    "SessionRecovery",
    "attempt_histograms_from_rows",
    "call_conditions",
    "call_counts_from_rows",
    "conditions",
    "failed_turn_counts",
    "primary_reason_counts_from_rows",
    "reason_counts_from_rows",
    "request_conditions",
    "request_counts_from_rows",
    "secret_redaction_counts",
    "session_calls",
    "session_error_counts_from_rows",
    "session_error_rows",
    "session_exists",
    "session_profiles",
    "session_project_roots",
    "session_redactions",
    "session_request_count",
    "ungoverned_text_counts",
    "variant_calls",
]



@dataclass(frozen=True, slots=True)
class Filters:
    """What a statistic covers: calls created (requests started) in [since, until), and exact matches."""

    since: float | None = None
    until: float | None = None
    policy: str | None = None
    model: str | None = None
    route: str | None = None


@dataclass(frozen=True, slots=True)
class LoopSummary:
    """A model's loops (error runs of at least the policy's `loop_min_attempts`) and its recovery."""

    count: int = 0  # loops
    max_attempts: int = 0  # the longest loop's attempts
    total_attempts: int = 0  # all loops' attempts (mean: over count)
    exact_repeats: int = 0  # loops whose every attempt sent the very same command
    # Error calls followed by another call of their session, and those followed by an allowed one.
    followed: int = 0
    recovered: int = 0


# The figures' named results. NamedTuples, so a figure from the rollups compares equal to the same figure from
# the rows; readers take them by field name.

class CallCounts(NamedTuple):
    calls: int = 0
    errors: int = 0


class RequestCounts(NamedTuple):
    requests: int = 0
    sessions: int = 0  # distinct sessions among the requests


class SessionErrors(NamedTuple):
    """One session's (part, whole) of the error rate: the unit the session bootstrap resamples."""

    errors: int
    calls: int


class SessionRecovery(NamedTuple):
    """One session's (part, whole) of the recovery rate."""

    recovered: int
    followed: int


class SessionErrorRow(NamedTuple):
    model: str
    session_id: str
    errors: int
    calls: int


def conditions(f: Filters, time_col: Any, policy_col: Any, model_col: Any, route_col: Any) -> list[Any]:
    conds: list[Any] = []
    if f.since is not None:
        conds.append(time_col >= f.since)
    if f.until is not None:
        conds.append(time_col < f.until)
    if f.policy is not None:
        conds.append(policy_col == f.policy)
    if f.model is not None:
        conds.append(model_col == f.model)
    if f.route is not None:
        conds.append(route_col == f.route)
    return conds


def call_conditions(f: Filters, table: Any = tool_calls) -> list[Any]:
    t = table.c
    return conditions(f, t.created_at, t.policy_name, t.model, t.route)


def request_conditions(f: Filters) -> list[Any]:
    r = requests.c
    return conditions(f, r.started_at, r.policy_name, r.model, r.route)


# --- plain counts -----------------------------------------------------------------------------------------

async def call_counts_from_rows(conn: AsyncConnection, f: Filters) -> dict[str, CallCounts]:
    """model -> its tool calls and errors.

    Grouped by model alone so the rows come in index order and need no sort; the primary reasons are a
    second query over the error calls only (grouping every call by reason sorts them all: ten times slower).
    """
    t = tool_calls.c
    errors = func.sum(case((is_error_sql(t.decision), 1), else_=0))
    stmt = select(t.model, func.count(), errors).where(*call_conditions(f)).group_by(t.model)
    return {m: CallCounts(calls=int(n), errors=int(e or 0)) for m, n, e in await conn.execute(stmt)}


async def ungoverned_text_counts(conn: AsyncConnection, f: Filters) -> dict[str, int]:
    """model -> turns of text-acting clients whose actions passed unread or unjudged (few: a partial index)."""
    r = requests.c
    stmt = (select(r.model, func.sum(r.ungoverned_text))
            .where(r.ungoverned_text.is_not(None), *request_conditions(f)).group_by(r.model))
    return {m: int(n or 0) for m, n in await conn.execute(stmt)}


# A request ended by its retry budget (`blocked`) or by the upstream (`upstream_error`). Written as migration
# 0021's partial index is, so that SQLite reads that index (it needs the index's own terms in the query).
FAILED_OUTCOMES = ("blocked", "upstream_error")


@dataclass(frozen=True, slots=True)
class FailedTurns:
    blocked: int = 0
    upstream_errors: int = 0


async def failed_turn_counts(conn: AsyncConnection, f: Filters) -> dict[str, FailedTurns]:
    """model -> its requests whose retry budget ran out (outcome `blocked`) and those the upstream failed (few: a
    partial index)."""
    r = requests.c
    stmt = (select(r.model, r.outcome, func.count())
            .where(r.outcome.in_([literal_column(f"'{o}'") for o in FAILED_OUTCOMES]), *request_conditions(f))
            .group_by(r.model, r.outcome))
    found: dict[str, dict[str, int]] = {}
    for model, outcome, n in await conn.execute(stmt):
        found.setdefault(model, {})[outcome] = int(n)
    return {m: FailedTurns(blocked=by.get("blocked", 0), upstream_errors=by.get("upstream_error", 0))
            for m, by in found.items()}


async def secret_redaction_counts(conn: AsyncConnection, f: Filters) -> dict[str, dict[str, int]]:
    """model -> detection rule -> secrets replaced in what went upstream (each tool result counted once, by the
    request that first carried it)."""
    s = secret_redactions.c
    conds: list[Any] = conditions(Filters(since=f.since, until=f.until, model=f.model), s.created_at, None, s.model,
                                  None)
    if f.policy is not None or f.route is not None:
        conds.append(s.request_id.in_(select(requests.c.id).where(*request_conditions(f))))
    stmt = select(s.model, s.type, func.sum(s.count)).where(*conds).group_by(s.model, s.type)
    found: dict[str, dict[str, int]] = {}
    for model, kind, count in await conn.execute(stmt):
        found.setdefault(model, {})[kind] = int(count or 0)
    return found


async def session_redactions(conn: AsyncConnection, session_id: str) -> list[dict[str, Any]]:
    """What was redacted in a session's requests: per tool call and rule, how many, in order."""
    s = secret_redactions.c
    stmt = (select(s.call_id, s.type, s.count, s.request_id, s.created_at).where(s.session_id == session_id)
            .order_by(s.created_at, s.call_id, s.type))
    return [dict(row._mapping) for row in await conn.execute(stmt)]


async def session_error_rows(conn: AsyncConnection, f: Filters) -> list[SessionErrorRow]:
    """Each session with calls in the window: its model, errors and tool calls, from the rows."""
    t = tool_calls.c
    errors = func.sum(case((is_error_sql(t.decision), 1), else_=0))
    # Grouped session first: the rows come in the order of the session index.
    stmt = (select(t.model, t.session_id, errors, func.count()).where(*call_conditions(f))
            .group_by(t.session_id, t.model))
    return [SessionErrorRow(model=model, session_id=session, errors=int(e or 0), calls=int(n))
            for model, session, e, n in await conn.execute(stmt)]


async def session_error_counts_from_rows(conn: AsyncConnection, f: Filters) -> dict[str, list[SessionErrors]]:
    """model -> errors and tool calls of each session: the units the session bootstrap resamples."""
    out: dict[str, list[SessionErrors]] = {}
    for row in await session_error_rows(conn, f):
        out.setdefault(row.model, []).append(SessionErrors(errors=row.errors, calls=row.calls))
    return out


async def variant_calls(conn: AsyncConnection, f: Filters) -> list[dict[str, Any]]:
    """The calls of sessions in a feedback experiment, in session order, with what the variant stats read."""
    t = tool_calls.c
    stmt = (select(t.session_id, t.model, t.feedback_variant, t.decision,
                   loop_key_sql(t).label("shape_key"))
            .where(t.feedback_variant.is_not(None), *call_conditions(f))
            .order_by(t.session_id, t.created_at, t.call_index))
    return [dict(row._mapping) for row in await conn.execute(stmt)]


async def request_counts_from_rows(conn: AsyncConnection, f: Filters) -> dict[str, RequestCounts]:
    """model -> its requests and the distinct sessions among them."""
    r = requests.c
    stmt = (select(r.model, func.count(), func.count(distinct(r.session_id)))
            .where(*request_conditions(f)).group_by(r.model))
    return {m: RequestCounts(requests=int(n), sessions=int(s)) for m, n, s in await conn.execute(stmt)}


async def reason_counts_from_rows(conn: AsyncConnection, f: Filters) -> dict[str, dict[str, int]]:
    """model -> {reason code: calls carrying it}; a call counts once for each code it carries."""
    tr = tool_call_reasons.c
    stmt = select(tr.model, tr.reason, func.count())
    if f.policy is None and f.route is None:
        conds = conditions(f, tr.created_at, None, tr.model, None)
    else:
        # The reasons table carries model and time, not policy or route: join only when asked for those.
        stmt = stmt.select_from(tool_call_reasons.join(tool_calls, tool_calls.c.id == tr.tool_call_id))
        conds = call_conditions(f)
    stmt = stmt.where(*conds).group_by(tr.model, tr.reason)
    out: dict[str, dict[str, int]] = {}
    for model, reason, n in await conn.execute(stmt):
        out.setdefault(model, {})[reason] = int(n)
    return out


async def primary_reason_counts_from_rows(conn: AsyncConnection, f: Filters) -> dict[str, dict[str, int]]:
    """model -> {primary reason: error calls led by it}; an error stored without reasons counts under its
    decision."""
    t = tool_calls.c
    primary = func.coalesce(t.primary_reason, t.decision)
    stmt = (select(t.model, primary, func.count())
            .where(is_error_sql(t.decision), *call_conditions(f))
            .group_by(t.model, primary))
    out: dict[str, dict[str, int]] = {}
    for model, reason, n in await conn.execute(stmt):
        out.setdefault(model, {})[reason] = int(n)
    return out


async def attempt_histograms_from_rows(conn: AsyncConnection, f: Filters) -> dict[str, dict[int, int]]:
    """model -> {upstream attempts: requests}; small whatever the store's size, so medians come from it."""
    r = requests.c
    stmt = (select(r.model, r.attempts, func.count())
            .where(*request_conditions(f)).group_by(r.model, r.attempts))
    out: dict[str, dict[int, int]] = {}
    for model, attempts, n in await conn.execute(stmt):
        out.setdefault(model, {})[int(attempts)] = int(n)
    return out


# --- call sequences: loops and recovery -------------------------------------------------------------------

# Which calls a sequence query covers, as conditions on the table or an alias of it.
Selection = Callable[[Any], list[Any]]


def _session_order(c: Any) -> tuple[Any, Any]:
    """The order of a session's calls. `created_at` carries the microsecond offset of the call's place in its
    attempt, so a tie needs one session judging two attempts in the same microsecond."""
    return (c.created_at, c.call_index)


def _neighbour(e: Any, selection: Selection, *, before: bool, value: Any) -> Any:
    """`value` of the selected call just before (or after) call `e` in its session: one index seek.

    This is LAG/LEAD over the session's calls, asked only for the error calls: a window over every call
    costs about 4 microseconds a row on SQLite, while the error calls are a tenth of the calls and each
    seek reads a couple of entries of ix_tool_calls_session_order.
    """
    p = tool_calls.alias("p" if before else "n")
    here, there = tuple_(e.created_at, e.call_index), tuple_(p.c.created_at, p.c.call_index)
    order = (p.c.created_at.desc(), p.c.call_index.desc()) if before else _session_order(p.c)
    return (
        select(value(p.c))
        .where(p.c.session_id == e.session_id, there < here if before else there > here, *selection(p))
        .order_by(*order)
        .limit(1)
        .scalar_subquery()
    )


def _error_runs(selection: Selection, name: str = "runs") -> CTE:
    """The selected error calls, each with the number of its run within the session (gaps and islands).

    A call starts a run unless the call just before it is an error of the same shape and model; a running
    SUM of the starts numbers the runs; GROUP BY the number gives each run.
    """
    t = tool_calls.c

    def continues(p: Any) -> Any:
        same_run = and_(is_error_sql(p.decision), loop_key_sql(p) == loop_key_sql(t), p.model == t.model)
        return case((same_run, 1), else_=0)

    errors = select(
        t.session_id, t.model, t.created_at, t.call_index, loop_key_sql(t).label("shape_key"),
        _neighbour(t, selection, before=True, value=continues).label("continues"),
    ).where(is_error_sql(t.decision), *selection(tool_calls)).cte(name + "_errors")
    e = errors.c
    is_start = case((e.continues == 1, 0), else_=1)
    run_no = func.sum(is_start).over(partition_by=e.session_id, order_by=_session_order(e), rows=(None, 0))
    return select(*[c for c in e if c.name != "continues"], run_no.label("run_no")).cte(name)


# --- one session --------------------------------------------------------------------------------------------

async def session_exists(conn: AsyncConnection, session_id: str) -> bool:
    found = select(literal(1)).where(or_(
        select(sessions.c.id).where(sessions.c.id == session_id).exists(),
        select(requests.c.id).where(requests.c.session_id == session_id).exists(),
        select(tool_calls.c.id).where(tool_calls.c.session_id == session_id).exists(),
    ))
    return (await conn.execute(found)).first() is not None


async def session_calls(conn: AsyncConnection, session_id: str) -> list[dict[str, Any]]:
    """The session's calls in order, each error call with its run number, run length and place in the run."""
    t = tool_calls.c
    runs = _error_runs(lambda a: [a.c.session_id == session_id])
    r = runs.c
    positioned = select(
        r.created_at, r.call_index, r.run_no,
        func.count().over(partition_by=(r.session_id, r.run_no)).label("run_length"),
        func.row_number().over(partition_by=(r.session_id, r.run_no),
                               order_by=_session_order(r)).label("run_position"),
    ).subquery("positioned")
    p = positioned.c
    stmt = (
        select(t.id, t.request_id, t.model, t.route, t.attempt, t.call_index, t.created_at, t.tool_name,
               t.source, t.arguments_raw, t.command, t.decision, t.primary_reason, t.reasons, t.shape,
               t.policy_name, t.policy_hash, t.mode, t.delivered, t.repaired_command, t.feedback_variant,
               p.run_no, p.run_length, p.run_position)
        .select_from(tool_calls.outerjoin(positioned, and_(p.created_at == t.created_at,
                                                           p.call_index == t.call_index)))
        .where(t.session_id == session_id)
        .order_by(*_session_order(t))
    )
    return [dict(row._mapping) for row in await conn.execute(stmt)]


async def session_requests(conn: AsyncConnection, session_id: str) -> list[dict[str, Any]]:
    """The session's requests in the order they started."""
    r = requests.c
    stmt = (select(r.id, r.started_at, r.model, r.route, r.stream, r.attempts, r.outcome, r.status, r.error,
                   r.profiles, r.duration_ms, r.budget_exhausted)
            .where(r.session_id == session_id).order_by(r.started_at, r.id))
    return [dict(row._mapping) for row in await conn.execute(stmt)]


async def session_row(conn: AsyncConnection, session_id: str) -> dict[str, Any]:
    """The session's own row, every column the store has (a later migration may add the project root)."""
    row = (await conn.execute(select(sessions).where(sessions.c.id == session_id))).first()
    return dict(row._mapping) if row is not None else {}


async def session_request_count(conn: AsyncConnection, session_id: str) -> int:
    stmt = select(func.count()).select_from(requests).where(requests.c.session_id == session_id)
    return int((await conn.execute(stmt)).scalar_one())


async def session_project_roots(conn: AsyncConnection, session_id: str) -> list[str]:
    """The project roots the session's requests were judged under (pinned or learned), in the order they came."""
    stmt = (select(requests.c.project_root).where(requests.c.session_id == session_id,
                                                  requests.c.project_root.is_not(None))
            .group_by(requests.c.project_root).order_by(func.min(requests.c.started_at)))
    return [value for (value,) in await conn.execute(stmt)]


async def session_profiles(conn: AsyncConnection, session_id: str) -> list[str]:
    """The tool profiles chosen for the session's requests, in the order they first appear."""
    stmt = (select(requests.c.profiles).where(requests.c.session_id == session_id, requests.c.profiles.is_not(None))
            .group_by(requests.c.profiles).order_by(func.min(requests.c.started_at)))
    names: dict[str, None] = {}
    for (value,) in await conn.execute(stmt):
        names.update(dict.fromkeys(p for p in value.split(",") if p))
    return list(names)
