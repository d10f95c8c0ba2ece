"""The one place the store differs by database: each supported backend declares every seam operation.

The store runs on SQLite and Postgres. What differs between them lives here and nowhere else:

- URL normalisation: the URLs people write (`sqlite:///x.db`, `postgres://...`) and the async driver;
- `engine`: the engine with its connection settings (SQLite's pragmas, Postgres's pool);
- `insert_ignore`: INSERT that skips a row whose key is already there;
- `upsert_add`: INSERT that adds to the stored counters when the key is already there;
- `lock_sessions`: the replica lock, a transaction lock per session so two replicas writing one session's
  calls never interleave;
- `hold_owner_lock` / `owner_alive`: a lock a proxy holds for its whole life, so another can tell that
  it is gone (proxy.store.journal);
- `bucket_number`: floor(t / size) as an integer;
- `writer_engine`: a plain (blocking) engine for the store writer's transactions, where the backend has a
  faster one than the async driver (SQLite: sqlite3 itself, one thread hop per transaction instead of one per
  statement); None where it has not;
- `statement_is_round_trip`: each statement is a round trip to a server (Postgres), so the writer sends few,
  larger ones: a batch of audit rows as one statement of its own (proxy/store/audit_statement.py, with
  data-modifying CTEs) instead of a transaction of `write_audit_rows` (one statement a table, plus BEGIN and
  COMMIT), and a rollup step's markers in one DELETE. SQLite runs statements in-process, where the writer's
  small prepared ones are cheapest (and it has no data-modifying CTEs).
- `concurrent_writers`: transactions on other connections write while one is open (Postgres), so the writer's
  rollup step runs on a connection of its own beside the batches (proxy/store/writer.py); SQLite lets one
  writer in at a time.

A backend is a subclass of `Backend`; one that leaves an operation out cannot be built (abstract methods),
and `tests/test_store_dialect.py` checks every declared backend and every URL scheme the settings accept.
Any other database fails loudly: at start-up (`backend_for_url`, by `proxy.store.db.create_engine`), and
at first use (`backend_of`), never with a plain insert or a lost lock. The migrations keep their own
dialect checks: they are frozen history.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from sqlalchemy import Connection, Engine, Integer, Table, cast, event, func, text
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

__all__ = [
    "BACKENDS",
    "BUSY_TIMEOUT_MS",
    "Backend",
    "UnsupportedDatabase",
    "backend_for_url",
    "backend_named",
    "backend_of",
    "check_db_url",
    "in_memory",
    "insert_ignore",
    "normalize_db_url",
    "upsert_add",
]

_WRITE_INSTEAD = "sqlite:///FILE.db or postgresql://USER:PASSWORD@HOST/DBNAME"
# How long a SQLite connection waits for a lock another holds before it fails.
BUSY_TIMEOUT_MS = 5000


class UnsupportedDatabase(ValueError):
    """A database this proxy has no backend for (a ValueError, so that settings validation reports it)."""


class Backend(ABC):
    """One database's implementation of every seam operation."""

    name: ClassVar[str]  # SQLAlchemy's dialect name
    # URL prefix people write -> the prefix with the async driver; an async prefix maps to itself.
    url_schemes: ClassVar[Mapping[str, str]]
    statement_is_round_trip: ClassVar[bool] = False
    concurrent_writers: ClassVar[bool] = False

    @abstractmethod
    def engine(self, url: str) -> AsyncEngine:
        """An engine for a normalised URL of this backend."""

    @abstractmethod
    def insert(self, table: Table) -> Any:
        """The dialect's INSERT for `table`, which can say ON CONFLICT."""

    @abstractmethod
    def lock_sessions(self, conn: Connection, session_ids: Sequence[str]) -> None:
        """Hold each session until the transaction ends; callers pass them in one order, so no deadlock."""

    @abstractmethod
    async def hold_owner_lock(self, engine: AsyncEngine, owner: str) -> AsyncConnection | None:
        """A connection of its own that holds `owner`'s lock until it is closed; None when this backend has
        no such lock."""

    @abstractmethod
    async def owner_alive(self, conn: AsyncConnection, owner: str) -> bool | None:
        """Whether some connection holds `owner`'s lock; None when this backend cannot tell."""

    @abstractmethod
    def bucket_number(self, column: Any, size: float) -> Any:
        """floor(column / size) as an integer, for positive values."""

    def writer_engine(self, engine: AsyncEngine) -> Engine | None:
        """A blocking engine on the same database for the store writer, used from one thread of its own; None:
        the writer uses `engine`."""
        return None


class SQLiteBackend(Backend):
    name = "sqlite"
    url_schemes: ClassVar[Mapping[str, str]] = {"sqlite://": "sqlite+aiosqlite://", "sqlite+aiosqlite://": "sqlite+aiosqlite://"}

    def engine(self, url: str) -> AsyncEngine:
        engine = create_async_engine(url)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine

    def insert(self, table: Table) -> Any:
        return sqlite.insert(table)

    def lock_sessions(self, conn: Connection, session_ids: Sequence[str]) -> None:
        # Nothing to do: SQLite lets one writer in at a time for the whole file.
        return None

    async def hold_owner_lock(self, engine: AsyncEngine, owner: str) -> AsyncConnection | None:
        return None

    async def owner_alive(self, conn: AsyncConnection, owner: str) -> bool | None:
        return None

    def bucket_number(self, column: Any, size: float) -> Any:
        return cast(column / size, Integer)  # SQLite's cast truncates: floor for positive values

    def writer_engine(self, engine: AsyncEngine) -> Engine | None:
        # aiosqlite hops to its thread and back for every statement (and SQLAlchemy through a greenlet): a
        # transaction of the release point took ~4 ms; sqlite3 in one thread of the writer's takes ~0.6.
        if in_memory(engine):
            return None  # a memory database is one per connection: the writer must share the engine's
        url = engine.url
        # Two connections, each held: the lane's transactions' and its checkpoints' (`WriterLane._checkpoint`).
        sync = create_sync_engine(url.set(drivername="sqlite"), connect_args={"check_same_thread": False},
                                  pool_size=2, max_overflow=0)
        event.listen(sync, "connect", _sqlite_pragmas)
        return sync


def in_memory(engine: AsyncEngine) -> bool:
    """Whether the store is a SQLite database in memory: one per connection, never seen by another process."""
    url = engine.url
    return url.get_backend_name() == "sqlite" and (
        not url.database or url.database == ":memory:" or "mode=memory" in str(url))


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the stats readers run while the writer commits; busy_timeout rides out a
    # short lock held by another process instead of failing the batch at once.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=OFF")
    cursor.close()


class PostgresBackend(Backend):
    name = "postgresql"
    url_schemes: ClassVar[Mapping[str, str]] = {
        "postgres://": "postgresql+asyncpg://", "postgresql://": "postgresql+asyncpg://",
        "postgresql+asyncpg://": "postgresql+asyncpg://",
    }
    statement_is_round_trip = True
    concurrent_writers = True
    _SESSION_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(:s, 0))"
    _OWNER_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(:owner, 0))"
    _OWNER_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(:owner, 0))"

    def engine(self, url: str) -> AsyncEngine:
        return create_async_engine(url, pool_size=10, max_overflow=10, pool_pre_ping=True)

    def insert(self, table: Table) -> Any:
        # Imported here: a proxy on SQLite never loads Postgres' dialect (2 MB of its memory).
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)

    def lock_sessions(self, conn: Connection, session_ids: Sequence[str]) -> None:
        if session_ids:
            conn.execute(text(self._SESSION_LOCK), [{"s": s} for s in session_ids])

    async def hold_owner_lock(self, engine: AsyncEngine, owner: str) -> AsyncConnection | None:
        conn = await engine.connect()
        await conn.execute(text(self._OWNER_LOCK), {"owner": owner})
        await conn.commit()  # the lock is the session's: it outlives the transaction
        return conn

    async def owner_alive(self, conn: AsyncConnection, owner: str) -> bool | None:
        free = (await conn.execute(text(self._OWNER_LOCK), {"owner": owner})).scalar()
        if free:
            await conn.execute(text(self._OWNER_UNLOCK), {"owner": owner})
        return not free

    def bucket_number(self, column: Any, size: float) -> Any:
        return cast(func.floor(column / size), Integer)  # Postgres's cast rounds


BACKENDS: dict[str, Backend] = {b.name: b for b in (SQLiteBackend(), PostgresBackend())}


def backend_named(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise UnsupportedDatabase(f"the store runs on {' or '.join(BACKENDS)}, not {name}; "
                                  f"use {_WRITE_INSTEAD}") from None


def backend_of(bound: Any) -> Backend:
    """The backend of an engine or a connection (sync or async)."""
    return backend_named(bound.dialect.name)


def _scheme_of(url: str) -> tuple[str, Backend] | None:
    for backend in BACKENDS.values():
        for written in backend.url_schemes:
            if url.startswith(written):
                return written, backend
    return None


def check_db_url(url: str) -> None:
    """Raises ValueError with what to write instead when `url` is not a store URL this proxy can open."""
    if _scheme_of(url) is not None:
        return
    scheme, sep, _ = url.partition("://")
    if sep:
        raise UnsupportedDatabase(f"{scheme}:// databases are not supported; use {_WRITE_INSTEAD}")
    raise UnsupportedDatabase(f"{url!r} is not a database URL; for a file write sqlite:///{url} "
                              "(or postgresql://USER:PASSWORD@HOST/DBNAME)")


def normalize_db_url(url: str) -> str:
    """Accept the URLs people write (`sqlite:///x.db`, `postgresql://...`) and pick the async driver."""
    found = _scheme_of(url)
    if found is None:
        return url  # check_db_url and backend_for_url say what is wrong with it
    written, backend = found
    return backend.url_schemes[written] + url[len(written):]


def backend_for_url(url: str) -> Backend:
    """The backend of a store URL; raises UnsupportedDatabase for any other."""
    check_db_url(url)
    found = _scheme_of(url)
    assert found is not None
    return found[1]


def insert_ignore(bound: Any, table: Table) -> Any:
    """INSERT into `table` that skips rows whose key is already there."""
    return _insert_ignore(backend_of(bound), table)


@functools.lru_cache(maxsize=256)
def _insert_ignore(backend: Backend, table: Table) -> Any:
    # One statement object per table, as `_upsert_add`: every answer's audit rows skip building and keying it.
    return backend.insert(table).on_conflict_do_nothing()


def upsert_add(bound: Any, table: Table, merge: Callable[[Any], Mapping[str, Any]] | None = None) -> Any:
    """INSERT into `table` that, for a row whose primary key is there, adds each other column to the stored
    value; `merge(excluded)` gives the SET clause of the columns that are not plain sums. A table of keys
    alone keeps the stored row."""
    return _upsert_add(backend_of(bound), table, merge)


@functools.lru_cache(maxsize=256)
def _upsert_add(backend: Backend, table: Table, merge: Callable[[Any], Mapping[str, Any]] | None) -> Any:
    # One statement object per table: SQLAlchemy memoises a statement's cache key on the object, so the rollups'
    # upserts of every batch skip building and keying the statement again.
    stmt = backend.insert(table)
    keys = [c.name for c in table.primary_key.columns]
    old, new = table.c, stmt.excluded
    values: dict[str, Any] = {c.name: old[c.name] + new[c.name] for c in table.columns if c.name not in keys}
    if merge is not None:
        values.update(merge(new))
    if not values:
        return stmt.on_conflict_do_nothing(index_elements=keys)
    return stmt.on_conflict_do_update(index_elements=keys, set_=values)
