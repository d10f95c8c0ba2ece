"""Store upkeep: copies and space.

A SQLite store is copied with SQLite's online backup API (`sqlite3.Connection.backup`): the copy is the store as
one read transaction saw it, consistent while the proxy keeps writing (in WAL mode a reader never waits for the
writer), written beside the target and renamed into place, so a copy that exists is whole. Postgres has its own
tool for that (`pg_dump`), whose command line `backup_command` gives.

`reclaim` returns the space of deleted rows after a prune: SQLite `VACUUM` (the file shrinks; it holds the write
lock while it copies, so a serving proxy's writer waits that long), Postgres `VACUUM (ANALYZE)` per table (the
space becomes reusable and the planner's figures fresh; only `VACUUM FULL`, which locks the tables, gives it back
to the operating system).
"""

from __future__ import annotations

import os
import shlex
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.store.dialect import in_memory

__all__ = ["Reclaimed", "backup_command", "backup_sqlite", "free_name", "reclaim", "sqlite_file", "store_bytes"]

# How long the copy waits for a lock another connection holds (a checkpoint, a VACUUM) before it fails.
_LOCK_WAIT_SECONDS = 60.0


def sqlite_file(engine: AsyncEngine) -> Path | None:
    """The file of a SQLite store; None for an in-memory one and for other databases."""
    if engine.url.get_backend_name() != "sqlite" or in_memory(engine):
        return None
    return Path(engine.url.database or "")


def free_name(path: Path, suffix: str) -> Path:
    """`<path><suffix>`, or with `.2`, `.3` ... after it when that name is taken: an earlier copy is never replaced."""
    candidate = path.with_name(path.name + suffix)
    n = 2
    while candidate.exists():
        candidate = path.with_name(f"{path.name}{suffix}.{n}")
        n += 1
    return candidate


def backup_sqlite(source: Path, target: Path) -> Path:
    """Copy the SQLite store at `source` to `target` (which must not exist) as one consistent snapshot; the copy is
    a single file (rollback journal, no -wal beside it). Returns `target`."""
    if not source.is_file():
        raise FileNotFoundError(f"no SQLite store at {source}")
    if target.exists():
        raise FileExistsError(f"{target} exists: name another file (a copy is never written over)")
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    src = sqlite3.connect(source, timeout=_LOCK_WAIT_SECONDS)
    try:
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst)  # all pages in one step: one read transaction, so one moment of the store
            dst.execute("PRAGMA journal_mode=DELETE")
        finally:
            dst.close()
    finally:
        src.close()
    os.replace(partial, target)
    return target


def backup_command(url: str, target: str) -> str:
    """The `pg_dump` line that copies a Postgres store to `target` (custom format, for `pg_restore`). The password
    is left out of the line: pg_dump reads it from PGPASSWORD or ~/.pgpass."""
    given = make_url(url)
    plain = URL.create("postgresql", username=given.username, host=given.host, port=given.port,
                       database=given.database, query=given.query)
    return (f"pg_dump --format=custom --no-owner --file={shlex.quote(target)} "
            f"{shlex.quote(plain.render_as_string(hide_password=False))}")


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """The store's size before and after `reclaim`, in bytes, and what was done."""

    before: int
    after: int
    how: str


async def store_bytes(engine: AsyncEngine) -> int:
    """The store's size on disk: a SQLite file with its WAL, or a Postgres database."""
    path = sqlite_file(engine)
    if path is not None:
        return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())
    if engine.url.get_backend_name() == "postgresql":
        async with engine.connect() as conn:
            return int(await conn.scalar(text("SELECT pg_database_size(current_database())")) or 0)
    return 0


async def reclaim(engine: AsyncEngine, tables: list[str]) -> Reclaimed:
    """Give back the space of deleted rows: SQLite VACUUM (then a checkpoint, so the file itself shrinks),
    Postgres VACUUM (ANALYZE) of `tables`, which must be tables of the store."""
    before = await store_bytes(engine)
    backend = engine.url.get_backend_name()
    if backend == "sqlite":
        if sqlite_file(engine) is None:
            return Reclaimed(before, before, "nothing (a store in memory)")
        async with engine.connect() as conn:
            raw = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await raw.execute(text("VACUUM"))
            await raw.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
        how = "VACUUM"
    elif backend == "postgresql":
        async with engine.connect() as conn:
            raw = await conn.execution_options(isolation_level="AUTOCOMMIT")  # VACUUM runs outside a transaction
            for table in tables:
                await raw.execute(text(f'VACUUM (ANALYZE) "{table}"'))
        how = "VACUUM (ANALYZE)"
    else:
        return Reclaimed(before, before, f"nothing ({backend} has no reclaim here)")
    return Reclaimed(before, await store_bytes(engine), how)
