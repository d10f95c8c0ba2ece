"""What a serving proxy does not load (issue 27's memory): SQLAlchemy's ORM (the commands load its asyncio
engine alone, and every name of `sqlalchemy.ext.asyncio` still works when asked for: the ORM ones load the
package in full then), and Postgres' dialect on SQLite."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_commands_and_the_app_load_no_orm_and_no_postgres() -> None:
    found = _run("import sys\n"
                 "from proxy.cli import build_parser\n"
                 "build_parser()\n"
                 "import proxy.http.app, proxy.store.db\n"
                 "print(*(name in sys.modules for name in ('sqlalchemy.orm', 'sqlalchemy.dialects.postgresql',\n"
                 "                                         'sqlalchemy.ext.asyncio.engine')))")
    assert found == "False False True"


def test_every_name_of_the_package_still_works() -> None:
    found = _run("import sys\n"
                 "from proxy.store.async_engine import light\n"
                 "light(); light()\n"
                 "from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine\n"
                 "from sqlalchemy.ext.asyncio.engine import AsyncEngine as Same\n"
                 "print(AsyncEngine is Same, 'sqlalchemy.orm' in sys.modules)\n"
                 "from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker\n"
                 "import sqlalchemy.ext.asyncio as package\n"
                 "print(package.AsyncSession is AsyncSession, package.create_async_engine is create_async_engine)\n"
                 "try:\n"
                 "    package.no_such_name\n"
                 "except AttributeError:\n"
                 "    print('AttributeError')")
    assert found.splitlines() == ["True False", "True True", "AttributeError"]


def test_an_asyncio_package_imported_before_is_left_alone() -> None:
    found = _run("import sys, sqlalchemy.ext.asyncio as full\n"
                 "from proxy.store.async_engine import light\n"
                 "light()\n"
                 "print(sys.modules['sqlalchemy.ext.asyncio'] is full, hasattr(full, 'AsyncSession'))")
    assert found == "True True"


def test_a_store_that_is_behind_is_migrated_by_a_child_and_the_serving_process_loads_no_alembic(tmp_path) -> None:
    found = _run("import asyncio, sys\n"
                 "from proxy.config import Settings\n"
                 "from proxy.cli.serve import preflight\n"
                 f"asyncio.run(preflight(Settings(db='sqlite:///{tmp_path}/fresh.db')))\n"
                 "from proxy.store.db import create_engine, _stored_revision, SCHEMA_HEAD\n"
                 f"engine = create_engine('sqlite:///{tmp_path}/fresh.db')\n"
                 "print(asyncio.run(_stored_revision(engine)) == SCHEMA_HEAD, 'alembic' in sys.modules)")
    assert found == "True False"


def test_a_migration_that_fails_in_the_child_is_one_line_of_the_store(tmp_path) -> None:
    (tmp_path / "not-a-db").write_bytes(b"this is not a database file" * 100)
    found = _run("import asyncio\n"
                 "from proxy.store.db import StoreError, create_engine\n"
                 "from proxy.store.migrate_apart import migrate_apart\n"
                 f"url = 'sqlite:///{tmp_path}/not-a-db'\n"
                 "try:\n"
                 "    asyncio.run(migrate_apart(url, create_engine(url)))\n"
                 "except Exception as exc:\n"
                 "    print(type(exc).__name__, '|', exc)")
    assert found.startswith(("StoreError | ", "OperationalError | ", "DatabaseError | ")), found
