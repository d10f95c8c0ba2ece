"""Journal entries a proxy left when it died mid-request, turned into request rows at the next start.

A journal entry (proxy.store.recorder) is the row of a request whose calls were released before it ended. The
request's final row replaces it; an entry whose owner is gone becomes a request row with outcome
`interrupted`, so every stored call has its request. An owner is gone when it ran on this host and its
process no longer exists, or (Postgres, any host) when nobody holds its advisory lock, which every proxy on
Postgres takes for its whole life. An entry of a SQLite store written on another host is recovered after a day.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from proxy.logs import get_logger
from proxy.store import tables
from proxy.store.dialect import backend_of
from proxy.store.writer import insert_rows

__all__ = ["OwnerLock", "recover"]

log = get_logger("proxy.store.journal")

INTERRUPTED = "interrupted"
_FOREIGN_SQLITE_AGE = 86_400.0


class OwnerLock:
    """Postgres: holds this proxy's advisory lock on a connection of its own while the proxy lives."""

    def __init__(self, engine: AsyncEngine, owner: str) -> None:
        self._engine, self._owner = engine, owner
        self._conn: AsyncConnection | None = None

    async def acquire(self) -> None:
        # None where the database has no such lock (SQLite): owners are then told apart by host and age.
        self._conn = await backend_of(self._engine).hold_owner_lock(self._engine, self._owner)

    async def release(self) -> None:
        if self._conn is not None:
            await self._conn.close()  # closing the session frees its advisory locks
            self._conn = None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _gone(conn: AsyncConnection, owner: str, me: str, oldest: float) -> bool:
    if owner == me:
        return False
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    same_host = host == socket.gethostname()[:64] and pid_text.isdigit()
    # Our own pid under another nonce is an earlier life of this process number.
    if same_host and (int(pid_text) == os.getpid() or not _pid_alive(int(pid_text))):
        return True
    alive = await backend_of(conn).owner_alive(conn, owner)
    if alive is not None:
        return not alive
    return time.time() - oldest > _FOREIGN_SQLITE_AGE


async def recover(engine: AsyncEngine, me: str) -> int:
    """Turn the journal entries of gone owners into request rows; returns how many."""
    journal = tables.request_journal
    async with engine.begin() as conn:
        entries = (await conn.execute(select(journal.c.id, journal.c.owner, journal.c.created_at, journal.c.row)
                                      .where(journal.c.owner != me))).all()
        if not entries:
            return 0
        oldest: dict[str, float] = {}
        for entry in entries:
            oldest[entry.owner] = min(oldest.get(entry.owner, entry.created_at), entry.created_at)
        gone = {owner for owner in oldest if await _gone(conn, owner, me, oldest[owner])}
        rows: list[dict[str, Any]] = []
        for entry in entries:
            if entry.owner not in gone:
                continue
            try:
                row = json.loads(entry.row)
            except ValueError:
                continue
            if not isinstance(row, dict) or row.get("id") != entry.id:
                continue
            row.update(outcome=INTERRUPTED, error="the proxy stopped before the request ended")
            rows.append(row)
        if rows:
            await insert_rows(conn, {"requests": rows})
    if rows:
        log.warning("store.journal_recovered", requests=len(rows), owners=len(gone))
    return len(rows)
