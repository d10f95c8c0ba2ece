"""The store's dialect seam (proxy/store/dialect.py): every backend the settings accept implements every
operation, on the real database; any other database fails loudly, at start-up and at first use."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
from pydantic import ValidationError
from sqlalchemy import literal, select
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.config import Settings
from proxy.store import dialect
from proxy.store.db import create_engine
from proxy.store.dialect import (
    BACKENDS,
    Backend,
    UnsupportedDatabase,
    backend_for_url,
    backend_named,
    insert_ignore,
    normalize_db_url,
    upsert_add,
)
from proxy.store.tables import sessions, stats_calls, stats_sessions
from tests.databases import BACKENDS as TESTED_BACKENDS

pytestmark = pytest.mark.each_database

SEAM = sorted(name for name, member in vars(Backend).items() if getattr(member, "__isabstractmethod__", False))
# Every way the settings accept to write a store URL, and the backend it must reach.
URLS = {
    "sqlite:///store.db": "sqlite", "sqlite+aiosqlite:///store.db": "sqlite",
    "postgres://u:p@db/x": "postgresql", "postgresql://u:p@db/x": "postgresql",
    "postgresql+asyncpg://u:p@db/x": "postgresql",
}
# The test databases (tests/databases.py) by the backend they run.
TESTED = {"sqlite": "sqlite", "postgres": "postgresql"}


def test_the_seam_has_its_operations() -> None:
    assert SEAM == ["bucket_number", "engine", "hold_owner_lock", "insert", "lock_sessions", "owner_alive"]


@pytest.mark.parametrize("name", sorted({*BACKENDS, *URLS.values(), *TESTED.values()}))
def test_every_backend_implements_every_operation(name: str) -> None:
    backend = backend_named(name)  # a backend the settings or the tests use must be declared
    assert not inspect.isabstract(type(backend))
    missing = [op for op in SEAM if getattr(type(backend), op) is getattr(Backend, op)]
    assert not missing, f"{name} lacks {missing}"


def test_every_url_the_settings_accept_has_a_backend() -> None:
    assert sorted(TESTED) == sorted(TESTED_BACKENDS)
    for url, name in URLS.items():
        assert Settings.of(db=url).store.url == url
        assert backend_for_url(url).name == name
        assert normalize_db_url(url).startswith(("sqlite+aiosqlite://", "postgresql+asyncpg://"))
    assert {w for b in BACKENDS.values() for w in b.url_schemes} == {u.split("//")[0] + "//" for u in URLS}


def test_a_backend_that_leaves_an_operation_out_cannot_be_built() -> None:
    everything_but_the_lock = {op: getattr(dialect.SQLiteBackend, op) for op in SEAM if op != "lock_sessions"}
    incomplete = type("Incomplete", (Backend,), everything_but_the_lock)
    with pytest.raises(TypeError, match="lock_sessions"):
        incomplete()


def test_another_database_fails_loudly() -> None:
    with pytest.raises(UnsupportedDatabase, match="mysql:// databases are not supported"):
        backend_for_url("mysql://u:p@host/db")
    with pytest.raises(UnsupportedDatabase, match="mysql:// databases are not supported"):
        create_engine("mysql://u:p@host/db")
    with pytest.raises(ValidationError, match="not supported"):
        Settings(db="mysql://u:p@host/db")
    # At first use too: never a plain insert or a lost lock.
    mysql = SimpleNamespace(dialect=SimpleNamespace(name="mysql"))
    for use in (lambda: insert_ignore(mysql, sessions), lambda: upsert_add(mysql, stats_calls),
                lambda: dialect.backend_of(mysql).lock_sessions(mysql, ["s"])):  # type: ignore[arg-type]
        with pytest.raises(UnsupportedDatabase, match="runs on sqlite or postgresql, not mysql"):
            use()


async def test_the_operations_on_the_real_database(engine: AsyncEngine) -> None:
    backend = dialect.backend_of(engine)
    row = {"id": "s1", "source": "header", "model": "m", "created_at": 1.0}
    hour = {"bucket": 0.0, "model": "m", "policy_name": "p", "route": "chat"}
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: backend.lock_sessions(sync, ["a", "b"]))
        await conn.execute(insert_ignore(conn, sessions), [row])
        await conn.execute(insert_ignore(conn, sessions), [{**row, "model": "other"}])  # kept, not replaced
        for n in (2, 3):
            await conn.execute(upsert_add(conn, stats_calls),
                               [{**hour, "decision": "reject", "primary_reason": "pipe", "n": n}])
            await conn.execute(upsert_add(conn, stats_sessions), [{**hour, "session_id": "s1"}])
        bucket = backend.bucket_number(literal(7199.5), 3600.0)
        assert (await conn.execute(select(bucket))).scalar() == 1
    async with engine.connect() as conn:
        assert (await conn.execute(select(sessions.c.model))).scalars().all() == ["m"]
        assert (await conn.execute(select(stats_calls.c.n))).scalars().all() == [5]
        assert len((await conn.execute(select(stats_sessions))).all()) == 1

    held = await backend.hold_owner_lock(engine, "host:1:a")
    try:
        async with engine.connect() as conn:
            alive, gone = await backend.owner_alive(conn, "host:1:a"), await backend.owner_alive(conn, "host:2:b")
        if held is None:  # no such lock: the journal tells owners apart by host and age
            assert (alive, gone) == (None, None)
        else:
            assert (alive, gone) == (True, False)
    finally:
        if held is not None:
            await held.close()


def test_the_schema_head_the_proxy_starts_at_is_alembics():
    # A start against a store at SCHEMA_HEAD skips alembic entirely; a stale constant would leave a store
    # behind the code unmigrated.
    from proxy.store.db import SCHEMA_HEAD, _head_revision

    assert _head_revision() == SCHEMA_HEAD
