"""A real store for each test, brought to head by the real migrations: a SQLite file, and a Postgres
database when ALLOWLIST_PROXY_TEST_PG names a server (the `db_url` fixture of tests/conftest.py)."""

from __future__ import annotations

import pytest

from .builder import Store


@pytest.fixture
def store() -> Store:
    return Store()
