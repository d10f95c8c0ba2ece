"""Engine creation and schema migration; database errors are translated here and nowhere else."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from proxy.errors import ProxyError
from proxy.logs import get_logger
from proxy.store.dialect import backend_for_url, normalize_db_url

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["SCHEMA_HEAD", "Migration", "SchemaAhead", "SchemaBehind", "SchemaError", "SchemaState", "StoreError",
           "alembic_config", "create_engine", "downgrade", "migrate", "prepare_schema", "revision_order",
           "schema_revisions", "schema_state", "translate_db_error"]

log = get_logger("proxy.store.db")

# The newest revision under migrations/ (a test checks it is alembic's head): a start against a store already
# there reads one row and never loads alembic, which would stay in a serving proxy's memory (10 MB of it).
SCHEMA_HEAD = "0021"

# `migrations/` beside the `proxy` package: at the top of a source checkout, and in site-packages, where the
# wheel installs it next to `proxy/` (pyproject.toml's package data).
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


class StoreError(ProxyError):
    status_code = 503
    error_type = "store_error"


class SchemaError(StoreError):
    """A schema change that cannot be made as asked (an unknown revision, a store not past the one named)."""


class SchemaAhead(SchemaError):
    """The store was migrated by a newer version: this one does not know its revision."""


class SchemaBehind(SchemaError):
    """The store is behind this proxy and the start was told not to migrate it."""


def translate_db_error(exc: SQLAlchemyError) -> StoreError:
    return StoreError(f"database error: {type(exc.orig if hasattr(exc, 'orig') else exc).__name__}: {exc}")


def create_engine(url: str) -> AsyncEngine:
    """An engine for a store URL; any database without a backend in proxy.store.dialect fails here, at start."""
    return backend_for_url(url).engine(normalize_db_url(url))


def alembic_config(url: str | None = None) -> Config:
    from alembic.config import Config

    if not MIGRATIONS_DIR.is_dir():
        raise StoreError(f"migrations not found at {MIGRATIONS_DIR}: reinstall the package")
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url:
        cfg.cmd_opts = None
        cfg.set_main_option("sqlalchemy.url", normalize_db_url(url))
    return cfg


@dataclass(frozen=True, slots=True)
class Migration:
    """What a migration did: the store's revision before and after (None: an empty store), and the backup taken
    first (a SQLite store that held a schema), if any."""

    before: str | None
    after: str | None
    backup: Path | None = None


@dataclass(frozen=True, slots=True)
class SchemaState:
    """Where a store's schema stands against this proxy's migrations."""

    current: str | None  # None: an empty database
    head: str
    state: Literal["empty", "behind", "head", "ahead"]


async def migrate(engine: AsyncEngine, revision: str = "head", *, announce: bool = False) -> Migration | None:
    """Bring the schema up to `revision` over the engine's own connection (safe inside a running loop); None when
    it already was there.

    A store already at head is left alone after one query: running alembic's environment to find nothing to do
    took a tenth of a second at every start, and loading alembic 10 MB for good. A store at a revision this proxy
    does not know (a newer version migrated it) is refused in one line (`SchemaAhead`); a store asked to go back
    is left as it is (`db downgrade` does that). A SQLite store that holds a schema is copied first, with the
    online backup API, to `<file>.before-<revision>` (proxy/store/upkeep.py). `announce`: log the revisions before
    and after (a start does; a command prints its own line, and a library caller's logging may not be set up).
    """
    current = await _stored_revision(engine)
    if revision == "head" and current == SCHEMA_HEAD:
        return None
    order = _revision_order()
    _refuse_unknown(current, order)
    target = _resolve(revision, order)
    if current is not None and order.index(current) >= order.index(target):
        return None  # there, or past it: upgrade never takes a store back
    backup = await _backup_first(engine, current, target)
    # A new store is made quietly (its first start's output is the banner); an upgrade says what it does.
    say = log.info if current is not None else log.debug
    if announce:
        say("store.migrating", from_revision=current or "none", to_revision=target,
            backup=str(backup) if backup else None)

    await _alembic(engine, "upgrade", target)
    if announce:
        say("store.migrated", from_revision=current or "none", to_revision=target)
    return Migration(current, target, backup)


async def downgrade(engine: AsyncEngine, revision: str) -> Migration:
    """Take the schema back to `revision` (or `base`) with the migrations' own downgrade()s, a SQLite store copied
    first to `<file>.before-<revision>`. Raises SchemaError when the store is not past `revision`."""
    current = await _stored_revision(engine)
    order = _revision_order()
    _refuse_unknown(current, order)
    target = "base" if revision == "base" else _resolve(revision, order)
    if current is None:
        raise SchemaError("the store has no schema: there is nothing to take back")
    if target != "base" and order.index(target) >= order.index(current):
        raise SchemaError(f"the store is at revision {current}, not past {target}: nothing to take back "
                          "(`allowlist-proxy db upgrade` moves it forward)")
    backup = await _backup_first(engine, current, target)
    await _alembic(engine, "downgrade", target)
    return Migration(current, None if target == "base" else target, backup)


async def _alembic(engine: AsyncEngine, step: Literal["upgrade", "downgrade"], target: str) -> None:
    """alembic's `upgrade` or `downgrade` to `target`, in one transaction over the engine's own connection."""
    from alembic import command

    cfg = alembic_config()

    def _run(sync_connection: Any) -> None:
        cfg.attributes["connection"] = sync_connection
        getattr(command, step)(cfg, target)

    conn: AsyncConnection
    async with engine.begin() as conn:
        await conn.run_sync(_run)


async def prepare_schema(engine: AsyncEngine, *, migrate_on_start: bool = True) -> Migration | None:
    """What a start does to the store: migrate it to head, or with `migrate_on_start` off (replicas, a store the
    operator migrates) only check that it is at head, refusing in one line a store behind or ahead."""
    if migrate_on_start:
        return await migrate(engine, announce=True)
    if await _stored_revision(engine) == SCHEMA_HEAD:
        return None  # one query, alembic never loaded (as `migrate` at head)
    found = await schema_state(engine)
    if found.state == "head":
        return None
    if found.state == "ahead":
        raise SchemaAhead(_ahead_message(found.current or "", found.head))
    raise SchemaBehind(
        f"the store's schema is at {found.current or 'none (an empty database)'}, this proxy needs {found.head}, "
        "and migrate_on_start is off: run `allowlist-proxy db upgrade` with the same --db first (or start one "
        "proxy without --no-migrate)")


async def schema_state(engine: AsyncEngine) -> SchemaState:
    """The store's revision against this proxy's newest; `ahead` when a newer version migrated it."""
    current, head = await schema_revisions(engine)
    if current is None:
        return SchemaState(current, head, "empty")
    if current == head:
        return SchemaState(current, head, "head")
    return SchemaState(current, head, "behind" if current in _revision_order() else "ahead")


def revision_order() -> list[str]:
    """This proxy's revisions, oldest first."""
    return list(_revision_order())


@functools.cache
def _revision_order() -> tuple[str, ...]:
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    return tuple(reversed([script.revision for script in scripts.walk_revisions()]))


def _resolve(revision: str, order: Sequence[str]) -> str:
    if revision == "head":
        return order[-1]
    if revision not in order:
        raise SchemaError(f"no revision {revision!r} in this proxy's migrations (`allowlist-proxy db history` "
                          f"lists them: {order[0]} to {order[-1]})")
    return revision


def _refuse_unknown(current: str | None, order: Sequence[str]) -> None:
    if current is not None and current not in order:
        raise SchemaAhead(_ahead_message(current, order[-1]))


def _ahead_message(current: str, head: str) -> str:
    from proxy import __version__

    return (f"the store's schema is at revision {current}, which this allowlist-proxy {__version__} (newest "
            f"revision {head}) does not know: a newer version migrated it. Run that version, or take the store "
            f"back first with its `allowlist-proxy db downgrade --to {head}` (docs/upgrade.md)")


async def _backup_first(engine: AsyncEngine, current: str | None, target: str) -> Path | None:
    """The copy a migration takes of a SQLite store that holds a schema; None for other stores."""
    from proxy.store import upkeep

    path = upkeep.sqlite_file(engine)
    if current is None or path is None or not path.is_file():
        return None
    return await asyncio.to_thread(upkeep.backup_sqlite, path, upkeep.free_name(path, f".before-{target}"))


async def _stored_revision(engine: AsyncEngine) -> str | None:
    """The store's revision as alembic records it; None for an empty store (or one with several heads)."""
    try:
        async with engine.connect() as conn:
            found = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalars().all()
    except SQLAlchemyError:
        return None
    return found[0] if len(found) == 1 else None


async def schema_revisions(engine: AsyncEngine) -> tuple[str | None, str]:
    """(the store's schema revision, None for an empty database; the newest this proxy knows)."""
    from alembic.runtime.migration import MigrationContext

    async with engine.connect() as conn:
        current = await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())
    return current, _head_revision()


@functools.cache
def _head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head() or ""
