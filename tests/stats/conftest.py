"""A real store for each test, brought to head by the real migrations: a SQLite file, and a Postgres
database when ALLOWLIST_PROXY_TEST_PG names a server (the `db_url` fixture of tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.store.db import create_engine, migrate

from .builder import Store


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(db_url)
    await migrate(engine)
    yield engine
    await engine.dispose()


@pytest.fixture
def store() -> Store:
    return Store()
