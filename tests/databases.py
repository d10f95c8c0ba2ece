"""The databases tests run against: always a SQLite file, and Postgres when one is configured.

`ALLOWLIST_PROXY_TEST_PG` names a Postgres server (a URL whose user may create databases);
`.ci/run` starts one. Each test gets a database of its own, dropped afterwards.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PG_ADMIN_URL = os.environ.get("ALLOWLIST_PROXY_TEST_PG", "")
BACKENDS = ["sqlite", "postgres"]


async def _admin(statement: str) -> None:
    import asyncpg

    dsn = PG_ADMIN_URL.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextmanager
def database_url(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / f'store-{uuid.uuid4().hex[:8]}.db'}"
        return
    if not PG_ADMIN_URL:
        pytest.skip("Postgres not configured: set ALLOWLIST_PROXY_TEST_PG (.ci/run does)")
    name = f"test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
