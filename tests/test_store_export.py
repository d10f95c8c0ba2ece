"""`db export` writes times as ISO 8601 in UTC and booleans as true/false in CSV and JSON Lines, Parquet with the
columns' own types where pyarrow is installed; `db prune` and `db export` take every time `stats --since` takes,
durations included (SQLite and Postgres)."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from proxy.cli import main
from proxy.cli.db import parse_date
from proxy.stats.models import parse_time
from proxy.store.db import create_engine
from proxy.store.export import export_rows
from tests.stats.builder import Store

pytestmark = pytest.mark.each_database

NOW = time.time()


def _fill(url: str) -> Store:
    """A session's request and calls two hours ago, one blocked turn an hour ago, one call a minute ago."""
    async def go() -> Store:
        store = Store(now=NOW - 7200)
        session = store.session("m")
        first = session.request()
        first.call("uv run scripts/search.py x")
        first.call("curl https://example.com")
        store.now = NOW - 3600
        blocked = session.request(outcome="blocked")
        store.now = NOW - 60
        blocked.call("uv run scripts/search.py y")
        written = {name: list(rows) for name, rows in store.rows.items()}
        engine = create_engine(url)
        try:
            await store.save(engine)
        finally:
            await engine.dispose()
        store.rows = written  # save() empties them
        return store

    return asyncio.run(go())


def _iso(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    assert moment.tzinfo is not None and moment.utcoffset().total_seconds() == 0, text
    return moment


def test_csv_and_jsonl_write_iso_times_and_true_false(db_url: str, tmp_path: Path, capsys):
    store = _fill(db_url)
    out = tmp_path / "calls.csv"
    assert main(["db", "export", "--db", db_url, "-o", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == len(store.rows["tool_calls"])
    for row, stored in zip(rows, sorted(store.rows["tool_calls"], key=lambda r: r["created_at"]), strict=True):
        assert abs(_iso(row["created_at"]).timestamp() - stored["created_at"]) < 1e-5
        assert row["delivered"] in ("true", "false")
    capsys.readouterr()
    assert main(["db", "export", "--db", db_url, "--table", "requests", "--format", "jsonl"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2
    assert all(isinstance(r["stream"], bool) and isinstance(r["budget_exhausted"], bool) for r in lines)
    assert [r["budget_exhausted"] for r in lines] == [False, True]
    assert all(_iso(r["started_at"]) for r in lines)


def test_export_and_prune_take_durations_as_stats_does(db_url: str, capsys):
    _fill(db_url)
    capsys.readouterr()
    assert main(["db", "export", "--db", db_url, "--format", "jsonl", "--since", "90m"]) == 0
    recent = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(recent) == 1 and recent[0]["command"] == "uv run scripts/search.py y"
    assert main(["db", "export", "--db", db_url, "--format", "jsonl", "--table", "requests", "--until", "90m"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert main(["db", "prune", "--before", "3h", "--no-vacuum", "--db", db_url]) == 0
    assert "nothing" in capsys.readouterr().out  # taken down to the hour: nothing is that old
    assert main(["db", "prune", "--before", "1h", "--no-vacuum", "--db", db_url]) == 0
    assert "2 tool_calls" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["db", "prune", "--before", "soon", "--db", db_url])
    assert "duration like 24h" in capsys.readouterr().err


def test_parquet_keeps_the_columns_types(db_url: str, tmp_path: Path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    store = _fill(db_url)
    out = tmp_path / "calls.parquet"
    assert main(["db", "export", "--db", db_url, "--format", "parquet", "-o", str(out)]) == 0
    table = pq.read_table(out)
    assert table.num_rows == len(store.rows["tool_calls"])
    assert str(table.schema.field("created_at").type) == "timestamp[us, tz=UTC]"
    assert str(table.schema.field("delivered").type) == "bool"
    assert str(table.schema.field("call_index").type) == "int64"
    first = table.column("created_at")[0].as_py()
    assert abs(first.timestamp() - min(r["created_at"] for r in store.rows["tool_calls"])) < 1e-5
    assert main(["db", "export", "--db", db_url, "--format", "parquet"]) == 2  # a file, not the terminal
    assert "-o FILE" in capsys.readouterr().err


def test_export_streams_rows_in_order(db_url: str):
    _fill(db_url)

    async def go() -> str:
        engine = create_engine(db_url)
        try:
            out = io.StringIO()
            await export_rows(engine, out, table="calls", fmt="jsonl")
            return out.getvalue()
        finally:
            await engine.dispose()

    times = [json.loads(line)["created_at"] for line in asyncio.run(go()).splitlines()]
    assert times == sorted(times) and len(times) == 3


def test_the_db_commands_read_times_with_the_stats_parser():
    assert parse_date("2026-01-31") == datetime(2026, 1, 31, tzinfo=UTC).timestamp()
    assert abs(parse_date("90d") - parse_time("90d")) < 5
    assert parse_date("1767225600") == 1767225600.0
