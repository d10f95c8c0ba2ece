"""Engine creation and schema migration; database errors are translated here and nowhere else."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from proxy.errors import ProxyError
from proxy.store.dialect import backend_for_url, normalize_db_url

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["SCHEMA_HEAD", "StoreError", "alembic_config", "create_engine", "migrate", "schema_revisions",
           "translate_db_error"]

# The newest revision under migrations/ (a test checks it is alembic's head): a start against a store already
# there reads one row and never loads alembic, which would stay in a serving proxy's memory (10 MB of it).
SCHEMA_HEAD = "0020"

# `migrations/` beside the `proxy` package: at the top of a source checkout, and in site-packages, where the
# wheel installs it next to `proxy/` (pyproject.toml's package data).
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


class StoreError(ProxyError):
    status_code = 503
    error_type = "store_error"


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


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Bring the schema to `revision` over the engine's own connection (safe inside a running loop).

    A store already at head is left alone after one query: running alembic's environment to find
    nothing to do took a tenth of a second at every start, and loading alembic 10 MB for good.
    """
    if revision == "head" and await _stored_revision(engine) == SCHEMA_HEAD:
        return
    from alembic import command

    cfg = alembic_config()

    def _upgrade(sync_connection: Any) -> None:
        cfg.attributes["connection"] = sync_connection
        command.upgrade(cfg, revision)

    conn: AsyncConnection
    async with engine.begin() as conn:
        await conn.run_sync(_upgrade)


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
