"""Upgrades with a way back (SQLite and Postgres): every migration's downgrade runs and the schema comes back the
same; a start migrates with its revisions logged and a SQLite store copied first; `db downgrade`, `db backup`,
`serve --no-migrate`; a store a newer version migrated is refused in one line; `db upgrade` never goes back."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, inspect, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.cli import main
from proxy.store import db as store_db
from proxy.store import figures, tables
from proxy.store.db import (
    SchemaAhead,
    SchemaBehind,
    SchemaError,
    create_engine,
    downgrade,
    migrate,
    prepare_schema,
    revision_order,
    schema_state,
)
from proxy.store.queries import Filters
from tests.conftest import ROOT, STRICT_POLICY
from tests.stats.test_rollups import build
from tests.test_logs import RecordedLog

pytestmark = pytest.mark.each_database

FUTURE = "9999"  # a revision no version of this proxy has: what an older proxy finds in a newer store


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> RecordedLog:
    log = RecordedLog()
    monkeypatch.setattr(store_db, "log", log)
    return log


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(__import__("os").environ):
        if name.startswith("ALLOWLIST_PROXY_") and name != "ALLOWLIST_PROXY_TEST_PG":
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


async def _schema(engine: AsyncEngine) -> dict[str, Any]:
    """Every table with its columns (name, type, nullable) and indexes (name, columns, unique)."""
    def read(sync: Any) -> dict[str, Any]:
        found = inspect(sync)
        return {name: ({(c["name"], str(c["type"]), c["nullable"]) for c in found.get_columns(name)},
                       {(i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in found.get_indexes(name)},
                       tuple(found.get_pk_constraint(name)["constrained_columns"]))
                for name in found.get_table_names()}

    async with engine.connect() as conn:
        return await conn.run_sync(read)


async def _stamp(engine: AsyncEngine, revision: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})


async def test_every_downgrade_runs_and_the_schema_comes_back_the_same(empty_db_url: str):
    """Head, then down one revision at a time to base (each migration's downgrade() on this database), then head
    again: the same tables, columns and indexes. The head is read from the migrations, never written here."""
    engine = create_engine(empty_db_url)
    try:
        order = revision_order()
        await migrate(engine)
        at_head = await _schema(engine)
        for older in reversed(["base", *order[:-1]]):
            done = await downgrade(engine, older)
            assert done.after == (None if older == "base" else older)
            assert (await schema_state(engine)).current == done.after
        assert set(await _schema(engine)) <= {"alembic_version"}
        await migrate(engine)
        assert await _schema(engine) == at_head
    finally:
        await engine.dispose()


async def test_a_store_with_rows_goes_back_to_the_first_revision_and_up_again(empty_db_url: str):
    """The calls and requests survive a downgrade to 0001 and the upgrade after it, and the figures rebuilt from
    them by the migrations read as before."""
    engine = create_engine(empty_db_url)
    try:
        await migrate(engine)
        await build(engine, batches=2)
        async with engine.connect() as conn:
            calls, requests = (await figures.call_counts(conn, Filters()),
                               await figures.request_counts(conn, Filters()))
        await downgrade(engine, revision_order()[0])
        assert (await schema_state(engine)).current == revision_order()[0]
        await migrate(engine)
        async with engine.connect() as conn:
            assert await figures.call_counts(conn, Filters()) == calls
            assert await figures.request_counts(conn, Filters()) == requests
    finally:
        await engine.dispose()


async def test_a_start_migrates_with_its_revisions_logged_and_copies_a_sqlite_store_first(
        empty_db_url: str, logged: RecordedLog):
    engine = create_engine(empty_db_url)
    old = revision_order()[3]
    head = revision_order()[-1]
    try:
        fresh = await migrate(engine, old)
        assert fresh is not None and fresh.before is None and fresh.backup is None  # nothing to copy yet
        assert not logged.lines  # only a start announces its migration
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO sessions (id, source, model, created_at) "
                                    "VALUES ('s1', 'header', 'm', 1.0)"))
        done = await prepare_schema(engine)
        assert done is not None and (done.before, done.after) == (old, head)
        events = [(line["event"], line.get("from_revision"), line.get("to_revision")) for line in logged.lines]
        assert ("store.migrating", old, head) in events and ("store.migrated", old, head) in events
        if engine.url.get_backend_name() == "sqlite":
            assert done.backup is not None and done.backup.name.endswith(f".before-{head}")
            with sqlite3.connect(done.backup) as copy:
                assert copy.execute("SELECT version_num FROM alembic_version").fetchall() == [(old,)]
                assert copy.execute("SELECT id FROM sessions").fetchall() == [("s1",)]
        else:
            assert done.backup is None  # Postgres: `db backup` prints the pg_dump line instead
        assert await prepare_schema(engine) is None  # at head: nothing done, nothing copied
    finally:
        await engine.dispose()


def test_a_store_a_newer_version_migrated_is_refused_in_one_line(db_url: str, capsys):
    async def refused() -> None:
        engine = create_engine(db_url)
        try:
            await _stamp(engine, FUTURE)
            for attempt in (migrate(engine), prepare_schema(engine, migrate_on_start=False),
                            downgrade(engine, "0001")):
                with pytest.raises(SchemaAhead, match=rf"revision {FUTURE}.*newer version") as caught:
                    await attempt
                assert "\n" not in str(caught.value)
        finally:
            await engine.dispose()

    asyncio.run(refused())
    capsys.readouterr()
    err = _one_line_exit_2(capsys, "serve", "--policy", str(STRICT_POLICY), "--port", "0", "--db", db_url)
    assert FUTURE in err and "newer version" in err and "db downgrade" in err
    assert main(["db", "current", "--db", db_url]) == 1
    assert "ahead" in capsys.readouterr().out
    _one_line_exit_2(capsys, "db", "upgrade", "--db", db_url)
    assert main(["stats", "--db", db_url]) == 1
    assert "newer version" in capsys.readouterr().err


def test_an_old_version_on_a_newer_store_exits_2_without_a_traceback(tmp_path: Path):
    """The whole program, as an operator runs it after rolling the proxy back without `db downgrade`."""
    store = tmp_path / "store.db"
    assert main(["db", "upgrade", "--db", f"sqlite:///{store}"]) == 0
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (FUTURE,))
    result = subprocess.run([sys.executable, "-m", "proxy", "serve", "--port", "0", "--policy", str(STRICT_POLICY),
                             "--db", f"sqlite:///{store}"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert FUTURE in result.stderr


def _one_line_exit_2(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(list(args))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_no_migrate_refuses_a_store_behind_and_serves_one_at_head(empty_db_url: str, db_url: str, capsys,
                                                                monkeypatch):
    async def behind() -> None:
        engine = create_engine(empty_db_url)
        try:
            with pytest.raises(SchemaBehind, match="none"):
                await prepare_schema(engine, migrate_on_start=False)
            await migrate(engine, "0004")
            with pytest.raises(SchemaBehind, match=r"0004.*db upgrade"):
                await prepare_schema(engine, migrate_on_start=False)
            assert (await schema_state(engine)).current == "0004"  # left as it was
        finally:
            await engine.dispose()

    async def at_head() -> None:
        engine = create_engine(db_url)
        try:
            assert await prepare_schema(engine, migrate_on_start=False) is None
        finally:
            await engine.dispose()

    asyncio.run(behind())
    capsys.readouterr()  # the migration's own log lines
    err = _one_line_exit_2(capsys, "serve", "--no-migrate", "--policy", str(STRICT_POLICY), "--port", "0",
                           "--db", empty_db_url)
    assert "0004" in err and "db upgrade" in err
    monkeypatch.setenv("ALLOWLIST_PROXY_MIGRATE_ON_START", "false")  # the setting, as a replica's environment has it
    _one_line_exit_2(capsys, "serve", "--policy", str(STRICT_POLICY), "--port", "0", "--db", empty_db_url)
    asyncio.run(at_head())


def test_db_upgrade_to_an_older_revision_answers_1_and_changes_nothing(db_url: str, capsys):
    head = revision_order()[-1]
    assert main(["db", "upgrade", "--revision", "0004", "--db", db_url]) == 1
    err = capsys.readouterr().err
    assert f"at {head}, past 0004" in err and "db downgrade --to 0004" in err
    assert main(["db", "current", "--db", db_url]) == 0
    _one_line_exit_2(capsys, "db", "upgrade", "--revision", "nope", "--db", db_url)


def test_db_downgrade_takes_the_store_back_and_refuses_to_go_forward(db_url: str, capsys, tmp_path: Path):
    order = revision_order()
    assert main(["db", "downgrade", "--to", order[-1], "--db", db_url]) == 1
    assert "nothing to take back" in capsys.readouterr().err
    assert main(["db", "downgrade", "--to", order[-2], "--db", db_url]) == 0
    out = capsys.readouterr().out
    assert f"schema at {order[-2]}" in out and f"from {order[-1]}" in out
    if db_url.startswith("sqlite"):
        assert f".before-{order[-2]}" in out and list(tmp_path.glob(f"*.before-{order[-2]}"))
    assert main(["db", "current", "--db", db_url]) == 1  # behind now
    assert main(["db", "upgrade", "--db", db_url]) == 0
    assert main(["db", "current", "--db", db_url]) == 0
    with pytest.raises(SchemaError):
        asyncio.run(_downgrade_to(db_url, "nope"))


async def _downgrade_to(url: str, revision: str) -> None:
    engine = create_engine(url)
    try:
        await downgrade(engine, revision)
    finally:
        await engine.dispose()


def test_db_backup_copies_a_sqlite_store_consistently_while_it_is_written(tmp_path: Path, capsys, backend: str):
    if backend != "sqlite":
        pytest.skip("the SQLite copy; Postgres prints the pg_dump line (the next test)")
    store = tmp_path / "store.db"
    url = f"sqlite:///{store}"
    assert main(["db", "upgrade", "--db", url]) == 0
    capsys.readouterr()
    with sqlite3.connect(store) as conn:
        conn.execute("CREATE TABLE pairs (n INTEGER)")
    stop = threading.Event()

    def write_pairs() -> None:
        # Two rows per transaction, as the proxy's writer commits a batch: a copy holds whole transactions.
        conn = sqlite3.connect(store, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        while not stop.is_set():
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO pairs VALUES (?)", [(1,), (2,)])
            conn.execute("COMMIT")
        conn.close()

    writer = threading.Thread(target=write_pairs)
    writer.start()
    try:
        copies = [tmp_path / f"copy{i}.db" for i in range(3)]
        for copy in copies:
            assert main(["db", "backup", "--db", url, "--to", str(copy)]) == 0
    finally:
        stop.set()
        writer.join()
    out = capsys.readouterr().out
    assert f"schema {revision_order()[-1]}" in out
    for copy in copies:
        assert not Path(f"{copy}-wal").exists()  # one file, whole
        with sqlite3.connect(copy) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            n, total = conn.execute("SELECT count(*), coalesce(sum(n), 0) FROM pairs").fetchone()
            assert n % 2 == 0 and total == 3 * n // 2
    assert main(["db", "backup", "--db", url, "--to", str(copies[0])]) == 2  # never written over
    assert "exists" in capsys.readouterr().err
    assert main(["db", "backup", "--db", url]) == 0  # the default name: beside the store, with the time
    assert list(tmp_path.glob("store.db.backup-*"))
    assert main(["db", "backup", "--db", f"sqlite:///{tmp_path / 'none.db'}"]) == 1
    assert not (tmp_path / "none.db").exists()  # a copy never creates the store it copies


def test_db_backup_of_postgres_prints_a_pg_dump_line_that_restores(db_url: str, backend: str, capsys,
                                                                   tmp_path: Path):
    import shutil

    if backend != "postgres":
        pytest.skip("Postgres only")
    dump = tmp_path / "store.dump"
    assert main(["db", "backup", "--db", db_url, "--to", str(dump)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("pg_dump ") and "\n" not in line
    password = db_url.split("//", 1)[1].split("@", 1)[0].partition(":")[2]
    if password:
        assert f":{password}@" not in line  # pg_dump reads it from PGPASSWORD or ~/.pgpass
    if shutil.which("pg_dump") is None:
        pytest.skip("no pg_dump here to run the line")
    env = {**__import__("os").environ, "PGPASSWORD": password}
    ran = subprocess.run(line, shell=True, env=env, capture_output=True, text=True, timeout=120)
    if ran.returncode != 0 and "version mismatch" in ran.stderr:
        pytest.skip(ran.stderr.strip())
    assert ran.returncode == 0, ran.stderr
    listing = subprocess.run(["pg_restore", "--list", str(dump)], capture_output=True, text=True, timeout=60)
    assert "alembic_version" in listing.stdout and "tool_calls" in listing.stdout


def test_prune_gives_the_space_back_and_says_how_much(db_url: str, capsys):
    async def fill() -> float:
        engine = create_engine(db_url)
        try:
            await build(engine, batches=1)
            async with engine.connect() as conn:
                return float(await conn.scalar(select(func.max(tables.tool_calls.c.created_at))))
        finally:
            await engine.dispose()

    newest = asyncio.run(fill())
    assert main(["db", "prune", "--before", str(newest + 7200), "--db", db_url]) == 0
    out = capsys.readouterr().out
    how = "VACUUM" if db_url.startswith("sqlite") else "VACUUM (ANALYZE)"
    assert f"{how}: " in out and " before, " in out and "given back" in out
    if db_url.startswith("sqlite"):
        before, after = _sizes(out)
        assert after < before
    assert main(["db", "prune", "--before", "90d", "--no-vacuum", "--db", db_url]) == 0
    assert "VACUUM" not in capsys.readouterr().out


def _sizes(out: str) -> tuple[float, float]:
    import re

    units = {"bytes": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}
    found = re.search(r"([\d.]+) (bytes|KB|MB|GB) before, ([\d.]+) (bytes|KB|MB|GB) after", out)
    assert found, out
    return float(found[1]) * units[found[2]], float(found[3]) * units[found[4]]


def test_the_upgrade_doc_covers_upgrade_rollback_and_replicas():
    doc = (ROOT / "docs" / "upgrade.md").read_text()
    for needed in ("db backup", "db downgrade --to", "--no-migrate", "migrate_on_start", ".before-", "pg_dump",
                   "pg_restore", "-wal"):
        assert needed in doc, needed



def test_a_replica_at_head_checks_its_store_without_loading_alembic(db_url: str):
    """`--no-migrate` at head costs one query, as a migrating start does (alembic would stay 10 MB in memory)."""
    probe = ("import asyncio, sys\n"
             "from proxy.store.db import create_engine, prepare_schema\n"
             "async def main():\n"
             f"    engine = create_engine({db_url!r})\n"
             "    assert await prepare_schema(engine, migrate_on_start=False) is None\n"
             "    await engine.dispose()\n"
             "asyncio.run(main())\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))\n")
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"
