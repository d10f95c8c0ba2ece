"""Hourly rollups of the store's additive figures, applied in the transaction right after the rows they count.

`/stats/models` over a million calls cannot read a million rows in 200 ms, so the writer adds each batch's
counts to one row per hour and key (calls by verdict, reason codes, requests by attempts and concurrency,
the sessions seen, latency bins) and extends the sessions' error runs (`proxy.store.runs`), in its own
transaction after the one that committed the rows (`proxy.store.pending_rollups`). The readers in
`proxy.store.figures` sum whole hours from here and read only the partial hours at a window's edges from the
rows themselves. `rebuild` computes everything from the rows: the migration that adds the rollups runs it,
and so does `allowlist-proxy db rebuild-rollups` after rows were changed by hand.

Everything here is synchronous SQLAlchemy Core on one Connection: the async writer runs it with
`AsyncConnection.run_sync`, and the migration with Alembic's own connection.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Table, delete, inspect, select

from proxy.mean import Mean
from proxy.policy.verdict import is_error
from proxy.store import runs, tables, totals
from proxy.store.dialect import upsert_add
from proxy.store.latency_sketch import Bin, bin_of, merge_bin
from proxy.store.prepared import Prepared

__all__ = ["BUCKET_SECONDS", "ROLLUP_TABLES", "Rollup", "apply_rows", "bucket_of", "latency_values", "rebuild"]

BUCKET_SECONDS = 3600.0
ROLLUP_TABLES: tuple[Table, ...] = (tables.stats_calls, tables.stats_reasons, tables.stats_requests,
                                    tables.stats_sessions, tables.stats_latency, tables.stats_session_calls)
_STREAM_CHUNK = 20_000


def bucket_of(t: float) -> float:
    return math.floor(t / BUCKET_SECONDS) * BUCKET_SECONDS


def latency_values(row: Mapping[Any, Any]) -> tuple[float | None, float | None]:
    """(TTFT, time per output token) of a request row as the latency figures count them, or Nones.

    Only streamed requests that ended well: for a whole answer the first token arrives with the last.
    """
    ttft = row.get("ttft_ms")
    if not row.get("stream") or row.get("outcome") != "ok" or ttft is None:
        return None, None
    tokens, duration = row.get("completion_tokens"), row.get("duration_ms")
    tpot = None
    if tokens is not None and tokens > 1 and duration is not None and duration >= ttft:
        tpot = (duration - ttft) / (tokens - 1)
    return ttft, tpot


@dataclass
class _RequestSums:
    n: int = 0
    rate: Mean = field(default_factory=Mean)  # completion tokens per second of the requests that have one
    ttft: Mean = field(default_factory=Mean)


@dataclass
class Rollup:
    """The counts of some rows, per rollup key, waiting to be added to the tables."""

    calls: dict[tuple[Any, ...], int] = field(default_factory=dict)
    reasons: dict[tuple[Any, ...], int] = field(default_factory=dict)
    requests: dict[tuple[Any, ...], _RequestSums] = field(default_factory=dict)
    sessions: set[tuple[Any, ...]] = field(default_factory=set)
    session_calls: dict[tuple[Any, ...], list[int]] = field(default_factory=dict)  # key -> [calls, errors]
    with_session_calls: bool = True  # False only while migrating a store that has no stats_session_calls yet
    with_totals: bool = True  # False while rebuilding: the totals are refreshed from the tables after
    latency: dict[tuple[Any, ...], dict[int, Bin]] = field(default_factory=dict)

    def add_call(self, row: Mapping[str, Any]) -> None:
        head = (bucket_of(row["created_at"]), row["model"], row.get("policy_name") or "", row["route"])
        decision = row["decision"]
        key = (*head, decision, row.get("primary_reason") or decision)
        self.calls[key] = self.calls.get(key, 0) + 1
        counts = self.session_calls.setdefault((*head, row["session_id"]), [0, 0])
        counts[0] += 1
        counts[1] += is_error(decision)
        for code in filter(None, (row.get("reasons") or "").split(",")):
            rkey = (*head, code)
            self.reasons[rkey] = self.reasons.get(rkey, 0) + 1

    def add_request(self, row: Mapping[str, Any]) -> None:
        bucket = bucket_of(row["started_at"])
        head = (bucket, row["model"], row.get("policy_name") or "", row["route"])
        sums = self.requests.setdefault((*head, row.get("attempts") or 1, row["concurrency"]), _RequestSums())
        sums.n += 1
        tokens, duration, ttft = row.get("completion_tokens"), row.get("duration_ms"), row.get("ttft_ms")
        if tokens is not None and duration is not None and duration > 0:
            sums.rate.add(tokens * 1000.0 / duration)
        if ttft is not None:
            sums.ttft.add(ttft)
        self.sessions.add((*head, row["session_id"]))
        for kind, value in zip(("ttft", "tpot"), latency_values(row), strict=True):
            if value is not None:
                bins = self.latency.setdefault((bucket, row["model"], row["concurrency"], kind), {})
                merge_bin(bins, bin_of(value), 1, value, value)

    def apply(self, conn: Connection) -> None:
        """Add the counts to the tables: an upsert per table, in key order so that two replicas adding to the
        same rows take their locks in the same order."""
        def rows(names: Sequence[str], items: Iterable[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[dict]:
            return [{**dict(zip(names, key, strict=True)), **values} for key, values in sorted(items)]

        head = ("bucket", "model", "policy_name", "route")
        _add(conn, tables.stats_calls, rows((*head, "decision", "primary_reason"),
                                     ((k, {"n": n}) for k, n in self.calls.items())))
        _add(conn, tables.stats_reasons, rows((*head, "reason"), ((k, {"n": n}) for k, n in self.reasons.items())))
        _add(conn, tables.stats_requests, rows((*head, "attempts", "concurrency"), (
            (k, {"n": s.n, **_sum_and_count("rate", s.rate), **_sum_and_count("ttft", s.ttft)})
            for k, s in self.requests.items())))
        _add(conn, tables.stats_sessions, rows((*head, "session_id"), ((k, {}) for k in self.sessions)))
        if self.with_session_calls:
            _add(conn, tables.stats_session_calls, rows((*head, "session_id"), (
                (k, {"calls": n, "errors": e}) for k, (n, e) in self.session_calls.items())))
        _add(conn, tables.stats_latency, rows(("bucket", "model", "concurrency", "kind", "bin"), (
            ((*k, index), {"n": b.count, "low": b.low, "high": b.high})
            for k, bins in self.latency.items() for index, b in bins.items())))
        if self.with_totals:
            self._add_totals(conn)

    def _add_totals(self, conn: Connection) -> None:
        """The same counts summed over the hours, into the all-time totals (proxy/store/totals.py)."""
        per_session: dict[tuple[str, str], list[int]] = {}
        for (_bucket, model, _policy, _route, session), (n, e) in self.session_calls.items():
            mine = per_session.setdefault((session, model), [0, 0])
            mine[0] += n
            mine[1] += e
        latency: dict[tuple[str, int, str], dict[int, Bin]] = {}
        for (_bucket, model, level, kind), bins in self.latency.items():
            into = latency.setdefault((model, level, kind), {})
            for index, b in bins.items():
                merge_bin(into, index, b.count, b.low, b.high)
        totals.add(conn, per_session, latency)


def _sum_and_count(name: str, mean: Mean) -> dict[str, Any]:
    # The columns of proxy.store.tables._sum_and_count.
    return {f"{name}_sum": mean.total, f"{name}_n": mean.n}


def _add(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    _adding_to(table).run(conn, rows)


@functools.cache
def _adding_to(table: Table) -> Prepared:
    return Prepared(lambda conn: upsert_add(conn, table, totals.keep_range(table) if "low" in table.c else None))


def apply_rows(conn: Connection, calls: Sequence[Mapping[str, Any]], reqs: Sequence[Mapping[str, Any]]) -> None:
    """Fold rows just inserted in this transaction into the rollups and the error runs."""
    rollup = Rollup()
    for row in calls:
        rollup.add_call(row)
    for row in reqs:
        rollup.add_request(row)
    rollup.apply(conn)
    if calls:
        totals.refresh_recovery(conn, runs.update_sessions(conn, calls))


def rebuild(conn: Connection) -> None:
    """Compute every rollup and error run again from the rows."""
    # Run by the migrations that add rollup tables, so a table of a later revision may not exist yet.
    present = [t for t in ROLLUP_TABLES if inspect(conn).has_table(t.name)]
    for table in (*present, runs.error_runs):
        conn.execute(delete(table))
    if inspect(conn).has_table(tables.stats_pending.name):
        conn.execute(delete(tables.stats_pending))  # every row is counted below, pending or not
    rollup = Rollup(with_session_calls=tables.stats_session_calls in present, with_totals=False)
    t, r = tables.tool_calls.c, tables.requests.c
    call_columns = (t.created_at, t.model, t.policy_name, t.route, t.decision, t.primary_reason, t.reasons,
                    t.session_id)
    for row in _stream(conn, select(*call_columns)):
        rollup.add_call(row)
    request_columns = (r.started_at, r.model, r.policy_name, r.route, r.attempts, r.concurrency, r.session_id,
                       r.completion_tokens, r.duration_ms, r.ttft_ms, r.stream, r.outcome)
    for row in _stream(conn, select(*request_columns)):
        rollup.add_request(row)
    rollup.apply(conn)
    runs.rebuild(conn)
    if totals.present(conn):
        totals.refresh(conn)


def _stream(conn: Connection, stmt: Any) -> Iterable[Mapping[Any, Any]]:
    # Per statement: Connection.execution_options would change the connection for what follows too.
    result = conn.execute(stmt.execution_options(stream_results=True, yield_per=_STREAM_CHUNK))
    for row in result:
        yield row._mapping
