"""Bring a store to head from a process of its own, so that the serving process never loads alembic.

Alembic and its migration scripts are ~13 MB of modules; loaded once, they stay in the process for good. A store
already at head needs one query to know it (`migrate` reads the revision and returns); a store that is behind
(a first start, an upgrade) is migrated by a child interpreter, and the serving process stays as lean as if the
store had been at head. The child migrates as a start does (`migrate(announce=True)`: the revisions logged, a
SQLite store copied first) and writes each log event and its outcome as a JSON line: the parent logs the events
as its own (held under the banner with the rest of the start's lines) and raises the store error the migration
raised (`SchemaAhead`, ...), in the one line it would have said in process.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.logs import get_logger
from proxy.store import db
from proxy.store.db import SCHEMA_HEAD, StoreError, _stored_revision, create_engine, migrate
from proxy.store.dialect import in_memory

__all__ = ["migrate_apart"]

log = get_logger("proxy.store.db")

_CHILD = "import sys; from proxy.store.migrate_apart import main; sys.exit(main(sys.argv[1], sys.argv[2]))"
_OUTCOME = "migrate_apart.outcome"  # the child's last line: {"event": _OUTCOME, "error": ..., "message": ...}
# The store errors a migration raises, raised again as themselves in the parent (anything else: StoreError).
_ERRORS: dict[str, type[StoreError]] = {cls.__name__: cls for cls in (
    db.StoreError, db.SchemaError, db.SchemaAhead, db.SchemaBehind)}


async def migrate_apart(url: str, engine: AsyncEngine, *, log_level: str = "info", log_format: str = "auto") -> None:
    """`migrate(engine, announce=True)`, in a child process where there is anything to do (the database must
    answer: the caller checked it does, within its own time limit; a migration takes as long as it takes)."""
    if in_memory(engine):
        return  # nothing another process could reach: the serving process migrates its own memory store
    if await _stored_revision(engine) == SCHEMA_HEAD:
        return
    # A plain child interpreter, not multiprocessing: nothing of the parent's `__main__` is run again, and a child
    # that cannot start is an exit code, not a pool of workers started over and over.
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", _CHILD, url, log_level],
                                   capture_output=True, text=True, stdin=subprocess.DEVNULL)
    outcome: dict[str, Any] | None = None
    for line in done.stdout.splitlines():
        event = _event(line)
        if event is None:
            continue
        if event.get("event") == _OUTCOME:
            outcome = event
            continue
        level = str(event.pop("level", "info"))
        name = str(event.pop("event"))
        event.pop("timestamp", None)
        getattr(log, level if level in ("debug", "info", "warning", "error") else "info")(name, **event)
    if outcome is not None and outcome.get("error") is None and done.returncode == 0:
        return
    if outcome is not None and outcome.get("error") is not None:
        raise _ERRORS.get(str(outcome["error"]), StoreError)(str(outcome.get("message", ""))[:2000])
    lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
    raise StoreError(f"migrating the store failed: {lines[-1][:2000]}" if lines
                     else f"migrating the store failed (exit {done.returncode})")


def _event(line: str) -> dict[str, Any] | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("event"), str) else None


def main(url: str, log_level: str = "info") -> int:
    """In the child: 0 once the store is at head; else 1. Every line on stdout is JSON: the migration's log events,
    then its outcome (the error's class and message where it failed)."""
    import structlog

    from proxy.logs import configure_logging

    configure_logging(log_level, "json")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.stdout))

    async def run() -> None:
        engine = create_engine(url)
        try:
            await migrate(engine, announce=True)
        finally:
            await engine.dispose()

    try:
        asyncio.run(run())
    except Exception as exc:  # any failure is the operator's to read, as the in-process migration's would be
        known = isinstance(exc, StoreError)
        error = type(exc).__name__ if known else "StoreError"
        message = str(exc) if known else f"migrating the store failed: {type(exc).__name__}: {exc}"
        print(json.dumps({"event": _OUTCOME, "error": error, "message": message[:2000]}), flush=True)
        return 1
    print(json.dumps({"event": _OUTCOME, "error": None}), flush=True)
    return 0
