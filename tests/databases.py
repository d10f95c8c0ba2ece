"""The databases tests run against: always a SQLite file, and Postgres when one is configured.

`ALLOWLIST_PROXY_TEST_PG` names a Postgres server (a URL whose user may create databases);
`.ci/run` starts one. Each test gets a database of its own, dropped afterwards. A migrated one is
a copy of a template migrated once per test process (a file copy; Postgres `CREATE DATABASE ...
TEMPLATE`), not migrated again for every test.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PG_ADMIN_URL = os.environ.get("ALLOWLIST_PROXY_TEST_PG", "")
BACKENDS = ["sqlite", "postgres"]

_templates: dict[str, str] = {}


async def _admin(statement: str) -> None:
    import asyncpg

    dsn = PG_ADMIN_URL.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def _pg_url(name: str) -> str:
    return f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"


async def _migrate(url: str) -> None:
    from proxy.store.db import create_engine, migrate

    engine = create_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


def _template(backend: str) -> str:
    """The migrated template of `backend`: a SQLite file path, or a Postgres database name."""
    if backend not in _templates:
        if backend == "sqlite":
            path = Path(tempfile.mkdtemp(prefix="allowlist-template-")) / "template.db"
            asyncio.run(_migrate(f"sqlite:///{path}"))
            _templates[backend] = str(path)
        else:
            name = f"template_{uuid.uuid4().hex[:12]}"
            asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
            asyncio.run(_migrate(_pg_url(name)))
            _templates[backend] = name
    return _templates[backend]


def drop_templates() -> None:
    for backend, template in _templates.items():
        if backend == "sqlite":
            shutil.rmtree(Path(template).parent, ignore_errors=True)
        else:
            asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)'))
    _templates.clear()


@contextmanager
def database_url(backend: str, tmp_path: Path, *, migrated: bool = False) -> Iterator[str]:
    """A database of this test's own: empty, or `migrated` to head (a copy of the template)."""
    if backend == "sqlite":
        path = tmp_path / f"store-{uuid.uuid4().hex[:8]}.db"
        if migrated:
            shutil.copyfile(_template("sqlite"), path)
        yield f"sqlite:///{path}"
        return
    if not PG_ADMIN_URL:
        pytest.skip("Postgres not configured: set ALLOWLIST_PROXY_TEST_PG (.ci/run does)")
    name = f"test_{uuid.uuid4().hex[:12]}"
    template = f' TEMPLATE "{_template("postgres")}"' if migrated else ""
    asyncio.run(_admin(f'CREATE DATABASE "{name}"{template}'))
    try:
        yield _pg_url(name)
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
