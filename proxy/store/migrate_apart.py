"""Bring a store to head from a process of its own, so that the serving process never loads alembic.

Alembic and its migration scripts are ~13 MB of modules; loaded once, they stay in the process for good. A store
already at head needs one query to know it (`migrate` reads the revision and returns); a store that is behind
(a first start, an upgrade) is migrated by a spawned child, and the serving process stays as lean as if the store
had been at head. The child's failure comes back as the same `StoreError` line an in-process migration raises.
"""

from __future__ import annotations

import asyncio
import multiprocessing

from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.store.db import SCHEMA_HEAD, StoreError, _stored_revision, create_engine, migrate
from proxy.store.dialect import in_memory

__all__ = ["migrate_apart"]


async def migrate_apart(url: str, engine: AsyncEngine, *, reach_seconds: float = 30.0) -> None:
    """`migrate(engine)`, in a child process where there is anything to do. TimeoutError where the database does
    not answer within `reach_seconds` (a migration itself may take as long as it takes)."""
    if in_memory(engine):
        return  # nothing another process could reach: the serving process migrates its own memory store
    async with asyncio.timeout(reach_seconds):
        async with engine.connect():
            pass  # it answers (a refusal raises here, as the migration would)
        if await _stored_revision(engine) == SCHEMA_HEAD:
            return
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        error = await asyncio.get_running_loop().run_in_executor(None, pool.apply, _migrate, (url,))
    if error is not None:
        raise StoreError(error)


def _migrate(url: str) -> str | None:
    """In the child: None once the store is at head, else what went wrong, as one line."""
    async def run() -> None:
        engine = create_engine(url)
        try:
            await migrate(engine)
        finally:
            await engine.dispose()

    try:
        asyncio.run(run())
    except Exception as exc:  # any failure is the operator's to read, as the in-process migration's would be
        return f"migrating the store failed: {type(exc).__name__}: {exc}"[:2000]
    return None
