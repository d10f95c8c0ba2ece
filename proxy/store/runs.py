"""Each session's runs of consecutive error calls of one shape, kept in `error_runs` as calls are written.

A run is a session's consecutive error calls (`Verdict.is_error`) with the same loop key (`Verdict.loop_key`)
and model, no other call between; a run of at least `loop_min_attempts` is a retry-variant loop (DESIGN.md).
Runs are found on the session's whole sequence, so a time window never cuts a loop in two: a window or filter
takes the runs whose first call it covers. A run also keeps the decision of the call after it, which is all
that recovery needs: of a run's attempts, all but the last are followed by a retry, and the last by
`next_decision`.

When a batch brings calls of a session, the runs from the last one that could change are found again from
the session's rows: in order, that is the session's open run (or nothing); a call arriving out of order
reaches back to the run it lands in. Postgres replicas writing the same session take a transaction lock on
it first, so the two never interleave.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby
from typing import Any

from sqlalchemy import Connection, and_, bindparam, case, delete, func, or_, select, tuple_

from proxy.policy.verdict import is_error
from proxy.store.dialect import backend_of
from proxy.store.prepared import Prepared
from proxy.store.tables import error_runs, tool_calls
from proxy.store.verdict_sql import is_error_sql, loop_key_sql

__all__ = ["error_runs", "find_runs", "followed_sql", "rebuild", "recovered_sql", "update_sessions"]

_INSERT_CHUNK = 5_000
_SESSIONS_PER_QUERY = 200  # three parameters each, under SQLite's old limit of 999
_IDS_PER_QUERY = 500


def recovered_sql() -> Any:
    """SUM over runs of the error calls followed by an allowed call: only a run's last can be."""
    return func.sum(case((error_runs.c.next_decision == "allow", 1), else_=0))


def followed_sql() -> Any:
    """SUM over runs of the error calls followed by another call: all of a run's attempts but the last, and the
    last once the session went on."""
    e = error_runs.c
    return func.sum(e.attempts - 1 + case((e.next_decision.is_not(None), 1), else_=0))


def _call_columns() -> tuple[Any, ...]:
    t = tool_calls.c
    return (
        t.session_id, t.created_at, t.call_index, t.decision, t.model, t.policy_name, t.route,
        loop_key_sql(t).label("shape_key"),
        # Only the error calls' commands are compared (exact repeats); an allowed call's is not read.
        case((is_error_sql(t.decision), func.coalesce(t.command, t.arguments_raw))).label("command_key"),
    )


def find_runs(calls: Iterable[Mapping[Any, Any]], open_run: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The runs of one session's calls, given in session order (created_at, call_index).

    `open_run` is a stored run that the calls may continue; they then begin with that run's last call, which
    is read for its command only (an exact run's commands all equal its last one).
    """
    found: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    command = ""
    calls = iter(calls)
    if open_run is not None:
        current = {**open_run, "next_at": None, "next_index": None, "next_decision": None}
        found.append(current)
        last = next(calls, None)
        command = "" if last is None else last["command_key"]
    for call in calls:
        error = is_error(call["decision"])
        if current is not None:
            if error and call["shape_key"] == current["shape"] and call["model"] == current["model"]:
                current["attempts"] += 1
                current["end_at"], current["end_index"] = call["created_at"], call["call_index"]
                current["exact"] = bool(current["exact"]) and call["command_key"] == command
                continue
            current.update(next_at=call["created_at"], next_index=call["call_index"],
                           next_decision=call["decision"])
            current = None
        if error:
            command = call["command_key"]
            current = {
                "session_id": call["session_id"], "start_at": call["created_at"],
                "start_index": call["call_index"], "end_at": call["created_at"], "end_index": call["call_index"],
                "model": call["model"], "policy_name": call["policy_name"] or "", "route": call["route"],
                "shape": call["shape_key"], "attempts": 1, "exact": True,
                "next_at": None, "next_index": None, "next_decision": None,
            }
            found.append(current)
    return found


def _key(at: Any, index: Any) -> Any:
    return tuple_(at, index)


def _anchor(conn: Connection, session_id: str, first: tuple[float, int]) -> tuple[float, int]:
    """Where to find the session's runs again from, for new calls the first of which is at `first`."""
    e = error_runs.c
    before = conn.execute(
        select(e.start_at, e.start_index, e.next_at, e.next_index)
        .where(e.session_id == session_id, _key(e.start_at, e.start_index) < first)
        .order_by(e.start_at.desc(), e.start_index.desc())
        .limit(1)
    ).first()
    if before is None:
        return first  # every call before `first` was allowed
    if before.next_at is not None and (before.next_at, before.next_index) < first:
        # The run ended before the new calls, and what followed it was allowed (an error would have started
        # a later run): the new calls start afresh.
        return first
    return before.start_at, before.start_index


def _latest_of_sessions(conn: Connection) -> Any:
    e = error_runs.c
    ranked = (
        select(error_runs, func.row_number().over(
            partition_by=e.session_id, order_by=(e.start_at.desc(), e.start_index.desc())).label("rank"))
        .where(e.session_id.in_(bindparam("ids", expanding=True)))
        .subquery()
    )
    return select(*[ranked.c[c.name] for c in error_runs.columns]).where(ranked.c.rank == 1)


_LATEST_RUNS = Prepared(_latest_of_sessions, expanding="ids")
_DELETE_RUN = Prepared(lambda conn: delete(error_runs).where(
    error_runs.c.session_id == bindparam("s"), error_runs.c.start_at == bindparam("a"),
    error_runs.c.start_index == bindparam("i")))
_INSERT_RUNS = Prepared(lambda conn: error_runs.insert())


def _latest_runs(conn: Connection, session_ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
    """session -> its run that starts last."""
    found: dict[str, Mapping[str, Any]] = {}
    for begin in range(0, len(session_ids), _IDS_PER_QUERY):
        found.update((row["session_id"], row)
                     for row in _LATEST_RUNS.all(conn, {"ids": session_ids[begin:begin + _IDS_PER_QUERY]}))
    return found


@functools.lru_cache(maxsize=32)
def _calls_of_sessions(sessions: int) -> Prepared:
    """The calls of `sessions` sessions (s_0, s_1, ...), each from its own (created_at, call_index) on."""
    def build(conn: Connection) -> Any:
        t = tool_calls.c
        return (select(*_call_columns())
                .where(or_(*[and_(t.session_id == bindparam(f"s_{n}"),
                                  _key(t.created_at, t.call_index) >= _key(bindparam(f"a_{n}"), bindparam(f"i_{n}")))
                             for n in range(sessions)]))
                .order_by(t.session_id, t.created_at, t.call_index))
    return Prepared(build)


def _calls_from(conn: Connection, starts: Mapping[str, tuple[float, int]]) -> dict[str, list[Mapping[Any, Any]]]:
    """session -> its calls from the given (created_at, call_index) on, in order."""
    out: dict[str, list[Mapping[Any, Any]]] = {}
    items = sorted(starts.items())
    for begin in range(0, len(items), _SESSIONS_PER_QUERY):
        chunk = items[begin:begin + _SESSIONS_PER_QUERY]
        params: dict[str, Any] = {}
        for n, (sid, (at, index)) in enumerate(chunk):
            params.update({f"s_{n}": sid, f"a_{n}": at, f"i_{n}": index})
        for row in _calls_of_sessions(len(chunk)).all(conn, params):
            out.setdefault(row["session_id"], []).append(row)
    return out


def update_sessions(conn: Connection, calls: Sequence[Mapping[str, Any]]) -> set[str]:
    """Bring the runs of the sessions these calls (just inserted) belong to up to date; the sessions whose runs
    changed.

    In the usual case a statement or two for the whole batch: the sessions' last runs, then their calls from
    the last run's last call (a run the new calls may continue or end) or from the first new error call. A
    session whose new calls land before the end of its last run (out of order) has its runs found again from
    the run they land in.
    """
    first: dict[str, tuple[float, int]] = {}
    with_errors: set[str] = set()
    for call in calls:
        key = (call["created_at"], call["call_index"])
        sid = call["session_id"]
        if sid not in first or key < first[sid]:
            first[sid] = key
        if is_error(call["decision"]):
            with_errors.add(sid)
    sessions = sorted(first)
    backend_of(conn).lock_sessions(conn, sessions)  # sorted: one order for every replica
    latest = _latest_runs(conn, sessions)
    continued: dict[str, Mapping[str, Any]] = {}  # session -> its last run, which the new calls may continue or end
    loads: dict[str, tuple[float, int]] = {}
    found: list[dict[str, Any]] = []
    for sid in sessions:
        last = latest.get(sid)
        if last is not None and first[sid] <= (last["end_at"], last["end_index"]):
            found.extend(_redo(conn, sid, first[sid]))
        elif last is not None and (last["next_at"] is None or (last["next_at"], last["next_index"]) >= first[sid]):
            continued[sid] = last
            loads[sid] = (last["end_at"], last["end_index"])
        elif sid in with_errors:
            loads[sid] = first[sid]
        # Otherwise only allowed calls after a finished run: nothing changes.
    _DELETE_RUN.run(conn, [{"s": sid, "a": r["start_at"], "i": r["start_index"]} for sid, r in continued.items()])
    for sid, rows in _calls_from(conn, loads).items():
        found.extend(find_runs(rows, continued.get(sid)))
    _insert(conn, found)
    return {run["session_id"] for run in found} | set(continued)


def _redo(conn: Connection, session_id: str, first: tuple[float, int]) -> list[dict[str, Any]]:
    """The session's runs from the one that `first` lands in (or the first call after it) to its end."""
    anchor = _anchor(conn, session_id, first)
    t, e = tool_calls.c, error_runs.c
    conn.execute(delete(error_runs).where(e.session_id == session_id, _key(e.start_at, e.start_index) >= anchor))
    rows = conn.execute(
        select(*_call_columns())
        .where(t.session_id == session_id, _key(t.created_at, t.call_index) >= anchor)
        .order_by(t.created_at, t.call_index)
    )
    return find_runs(row._mapping for row in rows)


def _insert(conn: Connection, found: list[dict[str, Any]]) -> None:
    for start in range(0, len(found), _INSERT_CHUNK):
        _INSERT_RUNS.run(conn, found[start:start + _INSERT_CHUNK])


def rebuild(conn: Connection) -> None:
    """Every session's runs from all its calls (the table is expected empty)."""
    t = tool_calls.c
    stmt = select(*_call_columns()).order_by(t.session_id, t.created_at, t.call_index)
    rows = conn.execute(stmt.execution_options(stream_results=True, yield_per=20_000))
    pending: list[dict[str, Any]] = []
    for _, session in groupby((row._mapping for row in rows), key=lambda m: m["session_id"]):
        pending.extend(find_runs(session))
        if len(pending) >= _INSERT_CHUNK:
            _insert(conn, pending)
            pending = []
    _insert(conn, pending)

