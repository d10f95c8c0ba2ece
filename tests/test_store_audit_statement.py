"""On Postgres the writer sends a batch as one statement (proxy/store/audit_statement.py): it writes exactly the rows
the transaction of `write_audit_rows` wrote, in one round trip, and a row Postgres refuses still ends up stored
safely."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.store import tables
from proxy.store.audit_statement import audit_statement
from proxy.store.db import create_engine
from proxy.store.lane import WriterLane
from proxy.store.safe_text import CUT_MARKER
from proxy.store.writer import StoreWriter, write_audit_rows
from tests.databases import database_url

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

Batch = dict[str, list[dict[str, Any]]]
NOW = 1_700_000_000.0


def _request(rid: str, **extra: Any) -> dict[str, Any]:
    # attempts and budget_exhausted left out: their column defaults apply
    return {"id": rid, "session_id": "s1", "model": "m", "route": "chat", "upstream": "u", "stream": True,
            "started_at": NOW, "status": 200, "outcome": "ok", "concurrency": 2, "prompt_tokens": 7, **extra}


def _call(cid: str, rid: str, **extra: Any) -> dict[str, Any]:
    # reasons and delivered left out unless given: their column defaults apply
    return {"id": cid, "request_id": rid, "session_id": "s1", "model": "m", "route": "chat", "attempt": 1,
            "call_index": 0, "created_at": NOW, "tool_name": "bash", "source": "openai",
            "arguments_raw": '{"command": "ls"}', "command": "ls", "decision": "reject", "primary_reason": "pipe",
            **extra}


def _journal(rid: str) -> dict[str, Any]:
    return {"id": rid, "owner": "host:1:abc", "created_at": NOW, "row": json.dumps({"id": rid})}


# The model's text as array elements: quotes, braces, commas, backslashes, the word NULL, SQL
HOSTILE = 'printf "%s" {a,b} \\"}\' NULL, ",\n\t$1::text); DELETE FROM tool_calls; --'

# What the recorder writes over a few answers, and what other requests or replicas write again.
BATCHES: list[Batch] = [
    {  # a release: the session, the journal entry, the calls and their reasons
        "sessions": [{"id": "s1", "source": "header", "model": "m", "created_at": NOW, "project_root": "/p"}],
        "request_journal": [_journal("r1")],
        "tool_calls": [_call("c1", "r1", reasons="pipe,redirect", delivered=True),
                       _call("c2", "r1", call_index=1, reasons="", delivered=False)],
        "tool_call_reasons": [{"tool_call_id": "c1", "position": p, "reason": r, "model": "m", "created_at": NOW}
                              for p, r in enumerate(("pipe", "redirect"))],
    },
    {  # the answer's end: its final row replaces the journal entry; the session again, first one wins
        "sessions": [{"id": "s1", "source": "lineage", "model": "other", "created_at": NOW + 9, "project_root": None},
                     {"id": "s2", "source": "lineage", "model": None, "created_at": NOW + 1, "project_root": None}],
        "session_lineage": [{"digest": "d1", "session_id": "s1", "created_at": NOW},
                            {"digest": "d1", "session_id": "s1", "created_at": NOW + 5},  # twice in one batch
                            {"digest": "d2", "session_id": "s1", "created_at": NOW}],
        "requests": [_request("r1", error="it's \"quoted\"; DROP TABLE requests; --", profiles="a,b")],
    },
    {  # a request that starts and ends in one batch (its entry never stays), one already journaled elsewhere
        "request_journal": [_journal("r2"), _journal("r3")],
        "requests": [_request("r2", stream=False, attempts=3, budget_exhausted=True)],
        "session_lineage": [{"digest": "d1", "session_id": "s1", "created_at": NOW + 7}],
    },
    {"request_journal": [_journal("r4")]},  # nothing to roll up: no marker
    {"request_journal": [{**_journal("r4"), "owner": "replica:2:def"}],  # written again: the first one wins
     "requests": [_request("r3", ttft_ms=12.5, ungoverned_text=2, stream=0)],  # a boolean as SQLAlchemy takes it
     "tool_calls": [_call("c3", "r3", arguments_json='{"command": "ls"}', decision="allow", primary_reason=None,
                          command=HOSTILE)]},
]
WRITTEN = ["sessions", "session_lineage", "request_journal", "requests", "tool_calls", "tool_call_reasons"]


@pytest.fixture
def second_db_url(backend: str, tmp_path: Path) -> Iterator[str]:
    with database_url(backend, tmp_path, migrated=True) as url:
        yield url


@pytest.fixture
async def two_engines(db_url: str, second_db_url: str) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine]]:
    engines = create_engine(db_url), create_engine(second_db_url)
    yield engines
    for engine in engines:
        await engine.dispose()


async def _contents(engine: AsyncEngine) -> dict[str, Any]:
    found: dict[str, Any] = {}
    async with engine.connect() as conn:
        for name in WRITTEN:
            table = tables.metadata.tables[name]
            rows = (await conn.execute(select(table).order_by(*table.primary_key.columns))).mappings()
            found[name] = [dict(row) for row in rows]
        markers = (await conn.execute(select(tables.stats_pending))).mappings()
        found["stats_pending"] = sorted((m["tool_call_ids"], m["request_ids"]) for m in markers)
    return found


async def test_one_statement_writes_exactly_the_rows_of_the_transaction(
        two_engines: tuple[AsyncEngine, AsyncEngine]) -> None:
    old, new = two_engines
    old_markers: list[str | None] = []
    for batch in BATCHES:
        async with old.begin() as conn:
            old_markers.append(await conn.run_sync(write_audit_rows, batch))
    lane = WriterLane(new)
    new_markers: list[str | None] = []
    try:
        for batch in BATCHES:
            statement = audit_statement(new.dialect, batch)
            await lane.run_statement(statement.sql, statement.args)
            new_markers.append(statement.marker)
    finally:
        await lane.close()
    written = await _contents(new)
    assert written == await _contents(old)
    assert [m is None for m in new_markers] == [m is None for m in old_markers] == [False, False, False, True, False]
    # r1, r2, r3 ended; r4 still runs, journaled by its first writer
    assert [(row["id"], row["owner"]) for row in written["request_journal"]] == [("r4", "host:1:abc")]
    assert written["sessions"][0]["source"] == "header"  # the first row of a session wins
    assert [(c["reasons"], c["delivered"]) for c in written["tool_calls"]] == [
        ("pipe,redirect", True), ("", False), ("", True)]
    assert written["tool_calls"][2]["command"] == HOSTILE
    assert written["requests"][2]["stream"] is False
    assert written["requests"][1]["attempts"] == 3 and written["requests"][0]["attempts"] == 1
    assert (json.dumps(["c1", "c2"]), "[]") in written["stats_pending"]


async def test_a_release_and_an_answers_end_are_one_statement_each(engine: AsyncEngine) -> None:
    statements: list[str] = []

    def log_queries(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.driver_connection.add_query_logger(lambda query: statements.append(query.query))

    event.listen(engine.sync_engine, "connect", log_queries)  # every connection, the pool's and the writer's
    writer = StoreWriter(engine)
    await writer.start()
    try:
        for i in range(3):  # the first prepares the statement on the writer's connection
            statements.clear()
            writer.put_many([(tables.sessions, {"id": "s1", "source": "header", "model": "m", "created_at": NOW}),
                             (tables.request_journal, _journal(f"r{i}")), (tables.tool_calls, _call(f"c{i}", f"r{i}"))])
            await writer.commit(10)
            released = list(statements)
            statements.clear()
            writer.put_many([(tables.session_lineage, {"digest": f"d{i}", "session_id": "s1", "created_at": NOW}),
                             (tables.requests, _request(f"r{i}"))])
            await writer.commit(10)
            ended = list(statements)
        assert len(released) == 1 and released[0].startswith("WITH")
        assert len(ended) == 1 and "DELETE FROM request_journal" in ended[0]
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM request_journal"))).scalar() == 0
            assert (await conn.execute(text("SELECT count(*) FROM stats_pending"))).scalar() == 6
    finally:
        await writer.stop(10)


async def test_a_refused_row_is_stored_safely_and_the_rest_of_its_batch_as_it_came(engine: AsyncEngine) -> None:
    writer = StoreWriter(engine)
    await writer.start()
    try:
        long_name = "t" * 300  # over tool_calls.tool_name's 256: refused, never cut silently by a cast
        writer.put_many([(tables.request_journal, _journal("r1")),
                         (tables.tool_calls, _call("c1", "r1", arguments_raw='{"command": "ls\x00"}',
                                                   tool_name=long_name)),
                         (tables.tool_calls, _call("c2", "r1", call_index=1, command="ls \udcff"))])
        await writer.commit(10)
        assert writer.rows_rejected == 2 and writer.rows_lost == 0
        # the writer's connection outlives refused statements, and a killed one is replaced
        async with engine.connect() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"))
        writer.put(tables.request_journal, _journal("r2"))
        await writer.commit(10)
        async with engine.connect() as conn:
            calls = {r.id: r for r in await conn.execute(select(tables.tool_calls))}
            journal = {r.id for r in await conn.execute(select(tables.request_journal))}
    finally:
        await writer.stop(10)
    assert calls["c1"].arguments_raw == '{"command": "ls\\x00"}'
    assert calls["c1"].tool_name == "t" * (256 - len(CUT_MARKER)) + CUT_MARKER
    assert calls["c2"].command == "ls \\udcff"
    assert journal == {"r1", "r2"}


async def test_the_statement_is_built_once_per_shape_and_refuses_a_column_its_table_lacks(engine: AsyncEngine) -> None:
    with pytest.raises(ValueError, match="requests has no column bogus"):
        audit_statement(engine.dialect, {"requests": [_request("r1", bogus=1)]})
    # built and compiled once per shape (tables and columns, not row counts): later batches look it up
    first = audit_statement(engine.dialect, BATCHES[0])
    more = {**BATCHES[0], "tool_calls": [*BATCHES[0]["tool_calls"], _call("c9", "r1", call_index=2)]}
    assert audit_statement(engine.dialect, more).sql is first.sql
