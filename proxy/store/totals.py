"""All-time totals of the rollups, for the figures of the whole store.

`/stats/models` without a window, a policy or a route (the dashboard's default) covers every hour, and the
session intervals need each session's (errors, calls) and (recovered, followed): summing the hourly rows per
session again on every request reads tens of thousands of rows for a million calls. The writer keeps those
sums per session and model here instead (`stats_session_totals`), and the latency bins summed over the hours
(`stats_latency_totals`), in the transaction that applies the rollups; the figures then read a few hundred
rows (`proxy.store.figures`). Any other window or filter reads the hourly rollups as before.

The totals are by definition the sums of `stats_session_calls`, `error_runs` and `stats_latency` over all their
rows: `refresh` computes them so (rebuild, retention, the migration that adds them); the writer adds each
batch's counts as it adds them to the hourly rows, and finds the recovery sums of the sessions whose runs it
changed again from their runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, bindparam, case, delete, func, inspect, select

from proxy.store import runs, tables
from proxy.store.dialect import upsert_add
from proxy.store.latency_sketch import Bin
from proxy.store.prepared import Prepared

__all__ = ["TOTALS_TABLES", "add", "keep_range", "present", "refresh", "refresh_recovery"]

TOTALS_TABLES = (tables.stats_session_totals, tables.stats_latency_totals)
_SESSIONS_PER_QUERY = 500  # under SQLite's old limit of 999 parameters


def present(conn: Connection) -> bool:
    """Whether the store has the totals (a migration before 0016 rebuilding the rollups finds none)."""
    return inspect(conn).has_table(tables.stats_session_totals.name)


def add(conn: Connection, session_calls: Mapping[tuple[str, str], Sequence[int]],
        latency: Mapping[tuple[str, int, str], Mapping[int, Bin]]) -> None:
    """Add a batch's (session, model) -> [calls, errors] and (model, concurrency, kind) -> bins, in key order
    (two replicas adding to the same rows take their locks in one order)."""
    _ADD_CALLS.run(conn, [{"session_id": s, "model": m, "calls": n, "errors": e, "recovered": None, "followed": None}
                          for (s, m), (n, e) in sorted(session_calls.items())])
    _ADD_LATENCY.run(conn, [{"model": m, "concurrency": c, "kind": k, "bin": index, "n": b.count, "low": b.low,
                             "high": b.high}
                            for (m, c, k), bins in sorted(latency.items()) for index, b in sorted(bins.items())])


def _keep_recovery(new: Any) -> dict[str, Any]:
    # Calls add up; the recovery sums are found from the runs (`refresh_recovery`), never added.
    old = tables.stats_session_totals.c
    return {"recovered": old.recovered, "followed": old.followed}


def _set_recovery(new: Any) -> dict[str, Any]:
    old = tables.stats_session_totals.c
    return {"calls": old.calls, "errors": old.errors, "recovered": new.recovered, "followed": new.followed}


@functools.cache  # one function per table: `upsert_add` keeps one statement per (table, merge)
def keep_range(table: Table) -> Callable[[Any], dict[str, Any]]:
    """The SET clause of a latency bin's upsert: it keeps the lowest and highest values seen, not their sums."""
    def merge(new: Any) -> dict[str, Any]:
        old = table.c
        return {"low": case((new.low < old.low, new.low), else_=old.low),
                "high": case((new.high > old.high, new.high), else_=old.high)}
    return merge


def refresh_recovery(conn: Connection, session_ids: Iterable[str]) -> None:
    """Find the recovery sums of these sessions again from their error runs (after the runs changed). A model of
    a session never loses all its runs here (its error calls stay, each in some run; only retention removes
    runs, and it refreshes everything), so each (session, model) with runs gets its new sums."""
    ids = sorted(set(session_ids))
    for start in range(0, len(ids), _SESSIONS_PER_QUERY):
        _SET_RECOVERY.run(conn, _recovery_rows(_RECOVERY_OF.all(conn, {"ids": ids[start:start + _SESSIONS_PER_QUERY]})))


def _recovery_of_sessions(conn: Connection) -> Any:
    e = tables.error_runs.c
    return (select(e.session_id, e.model, runs.recovered_sql().label("recovered"),
                   runs.followed_sql().label("followed"))
            .where(e.session_id.in_(bindparam("ids", expanding=True))).group_by(e.session_id, e.model))


def _recovery_rows(found: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"session_id": row["session_id"], "model": row["model"], "calls": 0, "errors": 0,
             "recovered": int(row["recovered"] or 0), "followed": int(row["followed"] or 0)} for row in found]


def _upsert_recovery(conn: Connection, stmt: Any) -> None:
    _SET_RECOVERY.run(conn, _recovery_rows(dict(row) for row in conn.execute(stmt).mappings()))


_ADD_CALLS = Prepared(lambda conn: upsert_add(conn, tables.stats_session_totals, _keep_recovery))
_ADD_LATENCY = Prepared(lambda conn: upsert_add(conn, tables.stats_latency_totals,
                                                keep_range(tables.stats_latency_totals)))
_SET_RECOVERY = Prepared(lambda conn: upsert_add(conn, tables.stats_session_totals, _set_recovery))
_RECOVERY_OF = Prepared(_recovery_of_sessions, expanding="ids")


def refresh(conn: Connection) -> None:
    """Compute the totals again from the hourly rollups and the error runs."""
    totals, latency_totals = tables.stats_session_totals, tables.stats_latency_totals
    conn.execute(delete(totals))
    conn.execute(delete(latency_totals))
    c = tables.stats_session_calls.c
    conn.execute(totals.insert().from_select(
        ["session_id", "model", "calls", "errors"],
        select(c.session_id, c.model, func.sum(c.calls), func.sum(c.errors)).group_by(c.session_id, c.model)))
    e = tables.error_runs.c
    _upsert_recovery(conn, select(e.session_id, e.model, runs.recovered_sql().label("recovered"),
                                  runs.followed_sql().label("followed")).group_by(e.session_id, e.model))
    lat = tables.stats_latency.c
    conn.execute(latency_totals.insert().from_select(
        ["model", "concurrency", "kind", "bin", "n", "low", "high"],
        select(lat.model, lat.concurrency, lat.kind, lat.bin, func.sum(lat.n), func.min(lat.low), func.max(lat.high))
        .group_by(lat.model, lat.concurrency, lat.kind, lat.bin)))
