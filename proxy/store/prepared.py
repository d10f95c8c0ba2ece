"""The store writer's statements: built once, and run on sqlite3's own cursor where sqlite3 is the driver.

SQLAlchemy Core builds every statement the writer runs, for SQLite and Postgres alike. Executing one through
SQLAlchemy costs its cache key, its parameters' construction and its result's set-up on every call: on
SQLite's writer lane (sqlite3 in a thread of its own, `proxy.store.lane`) that is several times the statement's
own work, and, in a thread woken with cold caches for each transaction, most of an answer's writer CPU. So
where a connection's driver is sqlite3, a `Prepared` statement is compiled once per shape (the parameter names
a row brings, the length of an expanding IN list) and its rows go to the driver's cursor as they are, through
the statement's own bind and result processors; on any other driver (asyncpg, aiosqlite) it runs through
SQLAlchemy, the same statement object every time. Both run the SQL SQLAlchemy compiled, in the caller's
transaction.
"""

from __future__ import annotations

import functools
import operator
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import Executable, SelectBase
from sqlalchemy.sql.schema import ScalarElementColumnDefault

__all__ = ["Prepared"]

Row = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    values: Callable[[Row], tuple[Any, ...]]  # a row's parameters, in the SQL's order
    results: Callable[[Sequence[Any]], dict[str, Any]]  # a result row, by name, as its columns' types read it


class Prepared:
    """A statement built once per database by `build(conn)`, run with rows of named parameters."""

    def __init__(self, build: Callable[[Connection], Executable], *, expanding: str | None = None) -> None:
        self._build = build
        self._expanding = expanding  # the name of the statement's expanding IN parameter, if it has one
        self._statements: dict[str, Executable] = {}
        self._compiled: dict[tuple[Any, ...], _Compiled] = {}

    def statement(self, conn: Connection) -> Executable:
        name = conn.dialect.name
        stmt = self._statements.get(name)
        if stmt is None:
            stmt = self._statements[name] = self._build(conn)
        return stmt

    def run(self, conn: Connection, rows: Sequence[Row]) -> int:
        """Execute once per row (no row: not at all); the number of rows changed."""
        if not rows:
            return 0
        driver = _sqlite3(conn)
        if driver is None:
            return int(conn.execute(self.statement(conn), list(rows)).rowcount)
        compiled = self._compile(conn, rows[0])
        return int(driver.executemany(compiled.sql, [compiled.values(row) for row in rows]).rowcount)

    def all(self, conn: Connection, params: Row) -> list[Row]:
        """The rows a select returns, each read by column name."""
        driver = _sqlite3(conn)
        if driver is None:
            return [dict(row) for row in conn.execute(self.statement(conn), dict(params)).mappings()]
        compiled = self._compile(conn, params)
        return [compiled.results(row) for row in driver.execute(compiled.sql, compiled.values(params))]

    def _compile(self, conn: Connection, row: Row) -> _Compiled:
        expanded = len(row[self._expanding]) if self._expanding is not None else None
        key = (*row, expanded)
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = _compile(self.statement(conn), conn.dialect, tuple(row), self._expanding,
                                                   expanded)
        return found


def _sqlite3(conn: Connection) -> sqlite3.Connection | None:
    """The sqlite3 connection under `conn`, None when its driver is another."""
    if conn.dialect.driver != "pysqlite":
        return None
    driver = conn.connection.driver_connection
    return driver if isinstance(driver, sqlite3.Connection) else None


def _compile(stmt: Executable, dialect: Dialect, keys: tuple[str, ...], expanding: str | None,
             expanded: int | None) -> _Compiled:
    assert isinstance(stmt, ClauseElement)
    compiled = stmt.compile(dialect=dialect, column_keys=list(keys))
    assert isinstance(compiled, SQLCompiler)
    if compiled.post_compile_params:
        # IN lists rendered one parameter a value (NAME_1, NAME_2, ...), the expanding one at this length; the
        # rendering wants a value for every parameter: stand-ins, as the rows give theirs at execution.
        stand_ins: dict[str, Any] = {bind.key: None for bind in compiled.binds.values() if bind.required}
        if expanding is not None:
            stand_ins[expanding] = [None] * (expanded or 0)
        stmt = stmt.params(stand_ins)
        compiled = stmt.compile(dialect=dialect, column_keys=list(keys), compile_kwargs={"render_postcompile": True})
        assert isinstance(compiled, SQLCompiler)
    if compiled.positiontup is None:
        raise TypeError(f"{dialect.name} does not take positional parameters")
    defaults: dict[str, Any] = {}
    for column in compiled.insert_prefetch:  # an INSERT's columns a row leaves out: their defaults, as SQLAlchemy's
        if not isinstance(column.default, ScalarElementColumnDefault):
            raise TypeError(f"column {column.key} has no scalar default: a Prepared INSERT must name it")
        defaults[column.key] = column.default.arg
    getters: list[Callable[[Row], Any]] = []
    processors: list[Callable[[Any], Any] | None] = []
    for name in compiled.positiontup:
        if name in compiled.binds:
            bind = compiled.binds[name]
            get = _named(name, keys, defaults, bind.effective_value)
        else:  # one value of an IN list, rendered as NAME_1, NAME_2, ...
            parent, _, position = name.rpartition("_")
            bind, index = compiled.binds[parent], int(position) - 1
            literals: Sequence[Any] = bind.effective_value or ()
            get = _item_of(parent, index) if parent == expanding else _constant(literals[index])
        getters.append(get)
        processors.append(bind.type.dialect_impl(dialect).bind_processor(dialect))
    columns: list[Any] = list(stmt.selected_columns) if isinstance(stmt, SelectBase) else []
    names = [str(column.key) for column in columns]
    readers = [column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns]
    return _Compiled(compiled.string, _values_of(compiled.positiontup, keys, getters, processors),
                     functools.partial(_result_row, names, readers))


def _values_of(names: Sequence[str], keys: tuple[str, ...], getters: list[Callable[[Row], Any]],
               processors: list[Callable[[Any], Any] | None]) -> Callable[[Row], tuple[Any, ...]]:
    """A row's parameters in the SQL's order. The usual INSERT takes every one from the row: one C call takes
    them, and only the few typed ones (booleans) go through their processor."""
    processed = tuple((i, p) for i, p in enumerate(processors) if p is not None)
    if len(names) > 1 and all(name in keys for name in names):
        take = operator.itemgetter(*names)
        return functools.partial(_taken, take, processed) if processed else take
    getters = [g if p is None else _processed(g, p) for g, p in zip(getters, processors, strict=True)]
    return functools.partial(_values, getters)


def _taken(take: Callable[[Row], tuple[Any, ...]], processed: tuple[tuple[int, Callable[[Any], Any]], ...],
           row: Row) -> tuple[Any, ...]:
    values = list(take(row))
    for index, processor in processed:
        values[index] = processor(values[index])
    return tuple(values)


def _named(name: str, keys: tuple[str, ...], defaults: Mapping[str, Any], literal: Any) -> Callable[[Row], Any]:
    if name in keys:
        return operator.itemgetter(name)  # missing from a later row: an error, as through SQLAlchemy
    if name in defaults:
        default = defaults[name]
        return lambda row: row.get(name, default)
    return _constant(literal)  # a value written into the statement itself


def _constant(value: Any) -> Callable[[Row], Any]:
    return lambda row: value


def _processed(get: Callable[[Row], Any], processor: Callable[[Any], Any]) -> Callable[[Row], Any]:
    return lambda row: processor(get(row))


def _item_of(name: str, index: int) -> Callable[[Row], Any]:
    return lambda row: row[name][index]


def _values(getters: list[Callable[[Row], Any]], row: Row) -> tuple[Any, ...]:
    return tuple(get(row) for get in getters)


def _result_row(names: Sequence[str], readers: Sequence[Callable[[Any], Any] | None],
                row: Sequence[Any]) -> dict[str, Any]:
    return {name: value if read is None else read(value) for name, value, read in zip(names, row, readers, strict=True)}
