"""Blocked turns and upstream errors per model, over the window and the filters, in `/stats/models`, `stats` and
`report` (SQLite and Postgres); a model the store never saw is named with exit 2 by `stats --compare`."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.cli import main
from proxy.stats.models import model_stats
from proxy.store.db import create_engine
from proxy.store.queries import Filters, failed_turn_counts

from .builder import START, Store

pytestmark = pytest.mark.each_database

HOUR = 3600.0


def build_turns(store: Store) -> None:
    """Model a: 6 requests, 2 blocked, 1 upstream error (one of each an hour later, on another route);
    model b: 3 requests, 1 blocked by the budget but ended by the client, none failed by the upstream."""
    a = store.session("a")
    for outcome in ("ok", "ok", "blocked", "upstream_error"):
        a.request(outcome=outcome).call("uv run scripts/search.py x")
    later = store.session("a", route="responses")
    store.now = START + HOUR
    for outcome in ("blocked", "ok"):
        later.request(outcome=outcome)
    b = store.session("b")
    b.request()
    b.request(outcome="client_disconnected")
    b.request(outcome="blocked")


async def test_the_counts_follow_the_window_and_the_filters(engine: AsyncEngine, store: Store):
    build_turns(store)
    await store.save(engine)
    stats = {m["model"]: m for m in (await model_stats(engine))["models"]}
    assert (stats["a"]["blocked_turns"], stats["a"]["upstream_errors"], stats["a"]["requests"]) == (2, 1, 6)
    assert stats["a"]["blocked_rate"] == pytest.approx(2 / 6)
    assert (stats["b"]["blocked_turns"], stats["b"]["upstream_errors"]) == (1, 0)
    early = {m["model"]: m for m in (await model_stats(engine, until=START + HOUR))["models"]}
    assert (early["a"]["blocked_turns"], early["a"]["upstream_errors"]) == (1, 1)
    async with engine.connect() as conn:
        by_route = await failed_turn_counts(conn, Filters(route="responses"))
        assert (by_route["a"].blocked, by_route["a"].upstream_errors) == (1, 0) and "b" not in by_route


async def test_the_count_reads_the_partial_index(engine: AsyncEngine):
    """Few requests fail: the count reads only those, through migration 0021's partial index."""
    if engine.url.get_backend_name() != "sqlite":
        pytest.skip("the plan is SQLite's to show; Postgres' depends on its statistics")
    from sqlalchemy import func, literal_column, select

    from proxy.store.queries import FAILED_OUTCOMES, request_conditions, requests

    r = requests.c
    stmt = (select(r.model, r.outcome, func.count())
            .where(r.outcome.in_([literal_column(f"'{o}'") for o in FAILED_OUTCOMES]),
                   *request_conditions(Filters(since=1.0)))
            .group_by(r.model, r.outcome)).compile(engine.sync_engine)
    async with engine.connect() as conn:
        plan = (await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {stmt}", tuple(stmt.params.values()))).all()
    assert any("ix_requests_failed" in str(step) for step in plan), plan


def _saved(url: str) -> None:
    async def go() -> None:
        store = Store()
        build_turns(store)
        engine = create_engine(url)
        try:
            await store.save(engine)
        finally:
            await engine.dispose()

    asyncio.run(go())


def test_stats_and_report_print_them(db_url: str, capsys):
    _saved(db_url)
    assert main(["stats", "--db", db_url]) == 0
    out = capsys.readouterr().out
    assert "Blocked turns" in out and "Upstream errors" in out
    row = next(line for line in out.splitlines() if line.startswith("a ") and "33.3%" in line)
    assert [cell for cell in row.split() if cell != "|"][1:] == ["6", "2", "33.3%", "1"]
    assert main(["report", "--db", db_url, "--markdown"]) == 0
    assert "## Blocked turns and upstream errors" in capsys.readouterr().out
    assert main(["report", "--db", db_url, "--json"]) == 0
    models = {m["model"]: m for m in json.loads(capsys.readouterr().out)["stats"]["models"]}
    assert (models["a"]["blocked_turns"], models["a"]["upstream_errors"]) == (2, 1)


def test_compare_with_a_model_the_store_never_saw_exits_2_naming_it(db_url: str, capsys):
    _saved(db_url)
    assert main(["stats", "--db", db_url, "--compare", "a,nope"]) == 2
    err = capsys.readouterr().err
    assert "'nope'" in err and "models: a, b" in err
    assert main(["stats", "--db", db_url, "--compare", "bb,a"]) == 2
    assert "did you mean 'b'" in capsys.readouterr().err
    assert main(["stats", "--db", db_url, "--compare", "a,b"]) == 0


async def test_the_route_serves_them(upstream, start_proxy, db_url: str):
    proxy = start_proxy(upstream.url)
    engine = create_engine(db_url)
    try:
        store = Store()
        build_turns(store)
        await store.save(engine)
        async with engine.connect() as conn:
            assert await conn.scalar(text("SELECT count(*) FROM requests")) == 9
    finally:
        await engine.dispose()
    with proxy.client() as client:
        got = {m["model"]: m for m in client.get("/stats/models").json()["models"]}
    assert (got["a"]["blocked_turns"], got["a"]["upstream_errors"], got["b"]["blocked_turns"]) == (2, 1, 1)
