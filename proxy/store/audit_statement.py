"""A batch of audit rows as one Postgres statement: one round trip, and its own transaction.

On Postgres every statement of the writer's release transaction is a round trip (BEGIN, an INSERT per table,
COMMIT: ~0.5 ms each through SQLAlchemy's asyncpg adapter, where the commit's fsync is ~0.1 ms), so the wait
of a released call was the number of statements. Here a batch is one statement whose data-modifying CTEs
carry every table's INSERT (`ON CONFLICT DO NOTHING` for the tables written again by other requests or
replicas), the journal entries' DELETE and the `stats_pending` marker: run outside a transaction it is its
own, so every row becomes visible at once (what readers relied on the insert order for) and is committed
before the waiters are released, as before.

Each table's rows go as one array per column through `unnest`, so the statement's text depends on which
tables and columns a batch has, never on its number of rows: it is built with SQLAlchemy Core and compiled
once per shape, and asyncpg prepares it once per connection. Values are parameters bound by asyncpg, cast to
the columns' types without their lengths (an explicit cast to `VARCHAR(n)` would cut a long value where the
INSERT refuses it). The CTEs all see the statement's starting snapshot, so a journal entry whose request's
final row is in the same batch is not inserted at all (the old path inserted it and deleted it again).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, String, Table, bindparam, delete, func, literal_column, select
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.schema import ScalarElementColumnDefault

from proxy.store import pending_rollups, tables

__all__ = ["INSERT_OR_IGNORE", "AuditStatement", "audit_statement"]

# Rows of these tables may be written again by another request or replica: first one wins.
INSERT_OR_IGNORE = frozenset({"sessions", "session_lineage", "request_journal", "secret_redactions"})

Row = Mapping[str, Any]
# A batch's shape: each table's name and the columns it writes, and whether journal entries are deleted.
_Shape = tuple[tuple[tuple[str, tuple[str, ...]], ...], bool]


@dataclass(frozen=True, slots=True)
class AuditStatement:
    sql: str
    args: list[Any]  # in the order of the SQL's $n
    marker: str | None  # the stats_pending marker's id, None when the batch has nothing to roll up


def audit_statement(dialect: Dialect, rows: Mapping[str, Sequence[Row]], *, pending: bool = True) -> AuditStatement:
    """The statement that writes `rows` (by table name) as `proxy.store.writer.write_audit_rows` does."""
    calls, reqs = rows.get("tool_calls", ()), rows.get("requests", ())
    finished = [r["id"] for r in reqs]
    inserts = {name: table_rows for name, table_rows in rows.items() if table_rows}
    if finished and "request_journal" in inserts:
        done = set(finished)
        inserts["request_journal"] = [r for r in inserts["request_journal"] if r["id"] not in done]
        if not inserts["request_journal"]:
            del inserts["request_journal"]
    marker: str | None = None
    if pending and (calls or reqs):
        marker_row = pending_rollups.marker_row(calls, reqs)
        inserts["stats_pending"] = [marker_row]  # the recorder never queues rows of this table
        marker = str(marker_row["id"])
    written = [(name, _columns(tables.metadata.tables[name], table_rows))
               for name, table_rows in sorted(inserts.items())]
    compiled = _compiled(dialect, (tuple(written), bool(finished)))
    args: list[Any] = []
    for name, columns in written:
        table_rows = inserts[name]
        for column in columns:
            values = [row.get(column, compiled.defaults.get((name, column))) for row in table_rows]
            process = compiled.processors.get((name, column))
            args.append(values if process is None else process(values))
    if finished:
        args.append(finished)
    return AuditStatement(compiled.sql, args, marker)


def _columns(table: Table, rows: Sequence[Row]) -> tuple[str, ...]:
    """The columns the rows name, and those with a default a row may leave out, in the table's order."""
    named: set[str] = set().union(*rows)
    unknown = named - set(table.c.keys())
    if unknown:
        raise ValueError(f"{table.name} has no column {', '.join(sorted(unknown))}")
    return tuple(c.name for c in table.columns if c.name in named or c.default is not None)


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    defaults: dict[tuple[str, str], Any]  # of the columns a row may leave out, by (table, column)
    # the columns whose values SQLAlchemy processes before the driver binds them (booleans, strictly), by the
    # processor of their array; the other columns' lists go to asyncpg as they are
    processors: dict[tuple[str, str], Callable[[Any], Any]]


@functools.lru_cache(maxsize=256)
def _compiled(dialect: Dialect, shape: _Shape) -> _Compiled:
    from sqlalchemy.dialects import postgresql  # only a proxy on Postgres loads its dialect

    written, finished = shape
    ctes = []
    defaults: dict[tuple[str, str], Any] = {}
    processors: dict[tuple[str, str], Callable[[Any], Any]] = {}
    for index, (name, columns) in enumerate(written):
        table = tables.metadata.tables[name]
        arrays = [bindparam(f"t{index}_{c}", type_=postgresql.ARRAY(_unbounded(table.c[c]))) for c in columns]
        for c, array in zip(columns, arrays, strict=True):
            process = array.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None and _unbounded(table.c[c]).dialect_impl(dialect).bind_processor(dialect):
                processors[(name, c)] = process
        source = func.unnest(*arrays).table_valued(*columns).render_derived()
        insert = postgresql.insert(table).from_select(list(columns), select(*source.c))
        if name in INSERT_OR_IGNORE:
            insert = insert.on_conflict_do_nothing()
        ctes.append(insert.cte(f"w{index}"))
        for c in columns:
            default = table.c[c].default
            if default is not None:
                if not isinstance(default, ScalarElementColumnDefault):
                    raise TypeError(f"column {name}.{c} has no scalar default: the writer's rows must name it")
                defaults[(name, c)] = default.arg
    if finished:
        journal = tables.request_journal
        ids = bindparam("finished", type_=postgresql.ARRAY(_unbounded(journal.c.id)))
        ctes.append(delete(journal).where(journal.c.id == func.any(ids)).cte("finished"))
    compiled = select(literal_column("1")).add_cte(*ctes).compile(dialect=dialect)
    assert isinstance(compiled, SQLCompiler)
    expected = [f"t{i}_{c}" for i, (_, columns) in enumerate(written) for c in columns]
    expected += ["finished"] if finished else []
    if list(compiled.positiontup or ()) != expected:  # the arguments are built in this order
        raise TypeError(f"{dialect.name} compiled the audit statement's parameters out of order")
    return _Compiled(compiled.string, defaults, processors)


def _unbounded(column: Column[Any]) -> Any:
    return String() if isinstance(column.type, String) and column.type.length else column.type
