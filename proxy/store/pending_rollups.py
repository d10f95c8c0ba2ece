"""The rollups of a batch, applied in the transaction after the one that commits its rows.

Audit before release needs only the rows; the hourly rollups and error runs (`proxy.store.rollups`) cost
several times the insert, so the writer commits the rows with a `stats_pending` marker naming them, releases
the waiters, and applies the rollups in its next transaction, deleting the marker there. The delete decides who
applies a marker: a replica or a start-up catching up finds it gone and adds nothing, so a batch is never
counted twice. A marker left by a proxy that died between the two transactions is applied at the next start
(`catch_up`). While the writer runs, the rollups trail the rows by two seconds at most: the writer gathers the
batches of those seconds (a few answers' rows) into one rollup step, and a stats read runs the step at once.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, String, bindparam, delete, func, select
from sqlalchemy.sql.expression import Executable

from proxy.store import rollups, tables
from proxy.store.dialect import backend_of
from proxy.store.prepared import Prepared

__all__ = ["apply", "apply_many", "catch_up", "marker_row"]

_IDS_PER_QUERY = 500  # under SQLite's old limit of 999 parameters


def marker_row(calls: Sequence[Mapping[str, Any]], reqs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex, "created_at": time.time(),
            "tool_call_ids": json.dumps([c["id"] for c in calls]), "request_ids": json.dumps([r["id"] for r in reqs])}


def apply(conn: Connection, marker_id: str, calls: Sequence[Mapping[str, Any]],
          reqs: Sequence[Mapping[str, Any]]) -> bool:
    """Add the marker's rows to the rollups, unless someone else already did; True when this call did."""
    if _DELETE_MARKER.run(conn, [{"id": marker_id}]) != 1:
        return False
    rollups.apply_rows(conn, calls, reqs)
    return True


def apply_many(conn: Connection, markers: Sequence[tuple[str, Sequence[Mapping[str, Any]],
                                                        Sequence[Mapping[str, Any]]]]) -> int:
    """`apply` for several batches at once, their rows added in one pass (a statement per rollup table, not
    per batch); the number of markers this call applied."""
    calls: list[Mapping[str, Any]] = []
    reqs: list[Mapping[str, Any]] = []
    applied = 0
    mine = _delete_markers(conn, [marker_id for marker_id, _, _ in markers])
    for marker_id, marker_calls, marker_reqs in markers:
        if marker_id in mine:
            calls.extend(marker_calls)
            reqs.extend(marker_reqs)
            applied += 1
    if calls or reqs:
        rollups.apply_rows(conn, calls, reqs)
    return applied


def _delete_markers(conn: Connection, ids: Sequence[str]) -> set[str]:
    """The markers among `ids` that this transaction deleted (the others were applied by someone else)."""
    if not backend_of(conn).statement_is_round_trip:
        return {marker_id for marker_id in ids if _DELETE_MARKER.run(conn, [{"id": marker_id}]) == 1}
    # One statement for them all: a rollup step gathers up to 8 batches, each a round trip on a server.
    return {str(row[0]) for row in conn.execute(_delete_returning(), {"ids": list(ids)})}


_DELETE_MARKER = Prepared(lambda conn: delete(tables.stats_pending).where(tables.stats_pending.c.id == bindparam("id")))


@functools.cache
def _delete_returning() -> Executable:
    from sqlalchemy.dialects import postgresql  # only a backend of round trips (Postgres) gets here

    pending = tables.stats_pending
    ids = bindparam("ids", type_=postgresql.ARRAY(String()))
    return delete(pending).where(pending.c.id == func.any(ids)).returning(pending.c.id)


def catch_up(conn: Connection) -> int:
    """Apply every marker left in the store, oldest first; the number applied."""
    pending = tables.stats_pending
    applied = 0
    for marker in conn.execute(select(pending).order_by(pending.c.created_at, pending.c.id)).all():
        calls = _rows(conn, tables.tool_calls, json.loads(marker.tool_call_ids))
        reqs = _rows(conn, tables.requests, json.loads(marker.request_ids))
        applied += apply(conn, marker.id, calls, reqs)
    return applied


def _rows(conn: Connection, table: Any, ids: list[str]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for start in range(0, len(ids), _IDS_PER_QUERY):
        chunk = ids[start:start + _IDS_PER_QUERY]
        found.extend(dict(row._mapping) for row in conn.execute(select(table).where(table.c.id.in_(chunk))))
    return found
