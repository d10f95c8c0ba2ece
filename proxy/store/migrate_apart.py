"""Bring a store to head from a process of its own, so that the serving process never loads alembic.

Alembic and its migration scripts are ~13 MB of modules; loaded once, they stay in the process for good. A store
already at head needs one query to know it (`migrate` reads the revision and returns); a store that is behind
(a first start, an upgrade) is migrated by a child interpreter, and the serving process stays as lean as if the
store had been at head. The child's failure comes back as a `StoreError` saying what the migration said.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.store.db import SCHEMA_HEAD, StoreError, _stored_revision, create_engine, migrate
from proxy.store.dialect import in_memory

__all__ = ["migrate_apart"]

_CHILD = "import sys; from proxy.store.migrate_apart import main; sys.exit(main(sys.argv[1]))"


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
    # A plain child interpreter, not multiprocessing: nothing of the parent's `__main__` is run again, and a child
    # that cannot start is an exit code, not a pool of workers started over and over.
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", _CHILD, url], capture_output=True,
                                   text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        lines = (done.stdout.strip() or done.stderr.strip()).splitlines()
        raise StoreError(lines[-1][:2000] if lines else f"migrating the store failed (exit {done.returncode})")


def main(url: str) -> int:
    """In the child: 0 once the store is at head; else 1, with what went wrong on stdout, one line."""
    async def run() -> None:
        engine = create_engine(url)
        try:
            await migrate(engine)
        finally:
            await engine.dispose()

    try:
        asyncio.run(run())
    except Exception as exc:  # any failure is the operator's to read, as the in-process migration's would be
        print(f"migrating the store failed: {type(exc).__name__}: {exc}"[:2000], flush=True)
        return 1
    return 0
