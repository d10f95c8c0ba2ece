"""Prepared statements (proxy/store/prepared.py) run on sqlite3's own cursor do what SQLAlchemy does with the
same statement: the defaults of columns a row leaves out, typed values in and out, IN lists (expanding and
literal), and an error for a row that lacks a parameter the first row had."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Connection, bindparam, select
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.store import tables
from proxy.store.dialect import backend_of
from proxy.store.prepared import Prepared

_INSERT = Prepared(lambda conn: tables.requests.insert())
_READ = Prepared(lambda conn: select(tables.requests.c.id, tables.requests.c.stream, tables.requests.c.attempts,
                                     tables.requests.c.budget_exhausted)
                 .where(tables.requests.c.id.in_(bindparam("ids", expanding=True)),
                        tables.requests.c.outcome.in_(["ok", "interrupted"]))
                 .order_by(tables.requests.c.id), expanding="ids")


def _request(request_id: str, **values: Any) -> dict[str, Any]:
    # attempts and budget_exhausted left out: their column defaults apply
    return {"id": request_id, "session_id": "s", "model": "m", "route": "chat", "upstream": "u", "stream": True,
            "started_at": 1.0, "outcome": "ok", "concurrency": 1, **values}


async def test_prepared_statements_on_sqlite3_write_and_read_as_through_sqlalchemy(engine: AsyncEngine) -> None:
    sync = backend_of(engine).writer_engine(engine)
    assert sync is not None
    with sync.begin() as conn:  # sqlite3: the driver's own cursor
        assert _INSERT.run(conn, [_request("a"), _request("b", stream=False, outcome="failed")]) == 2
        fast = _READ.all(conn, {"ids": ["a", "b", "c"]})
    async with engine.begin() as conn:  # aiosqlite: through SQLAlchemy
        await conn.run_sync(_INSERT.run, [_request("c")])
        slow = await conn.run_sync(_READ.all, {"ids": ["a", "b", "c"]})
    assert fast == [{"id": "a", "stream": True, "attempts": 1, "budget_exhausted": False}]
    assert slow == [*fast, {"id": "c", "stream": True, "attempts": 1, "budget_exhausted": False}]
    assert all(type(row["stream"]) is bool for row in slow)
    sync.dispose()


async def test_a_row_lacking_a_parameter_of_the_first_fails_on_sqlite3_as_through_sqlalchemy(
        engine: AsyncEngine) -> None:
    sync = backend_of(engine).writer_engine(engine)
    assert sync is not None
    lacking = {k: v for k, v in _request("e").items() if k != "upstream"}

    def insert(conn: Connection) -> None:
        _INSERT.run(conn, [_request("d"), lacking])

    with pytest.raises(KeyError), sync.begin() as conn:
        insert(conn)
    with pytest.raises(Exception, match="upstream"):
        async with engine.begin() as conn:
            await conn.run_sync(insert)
    sync.dispose()
