"""The hourly rollups and error runs give the same figures as the rows, whatever the window and however the
rows arrived (in many batches, a session's calls out of order, or all at once behind the writer's back)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.stats.models import model_stats, top_loops
from proxy.store import figures, queries, rollups
from proxy.store.db import create_engine, migrate
from proxy.store.latency_sketch import percentile, sketch
from proxy.store.queries import Filters
from proxy.store.runs import find_runs
from proxy.store.tables import error_runs, metadata

from .builder import ALLOWED, START, Store

pytestmark = pytest.mark.each_database

HOUR = 3600.0
COMMANDS = (ALLOWED, ALLOWED, ALLOWED, "uv run scripts/search.py | head -5", "uv run scripts/search.py | head -9",
            "timeout 5 uv run scripts/search.py", "cd src && uv run scripts/search.py", "curl https://x")


def build_traffic(store: Store, rng: random.Random) -> None:
    """Three models, two policies, two routes, 40 sessions over about ten hours, calls a few minutes apart,
    requests of every concurrency and attempt count, latencies sparse and dense."""
    sessions = [store.session(rng.choice(("a", "b", "c")), policy=rng.choice(("strict", "other")),
                              route=rng.choice(("chat", "responses"))) for _ in range(40)]
    for _ in range(220):
        session = rng.choice(sessions)
        store.now += rng.uniform(1, 300)
        stream_ttft = rng.choice((None, rng.uniform(20, 900), float(rng.randint(1, 50))))
        request = session.request(attempts=rng.choice((1, 1, 2, 3)), concurrency=rng.choice((1, 2, 6)),
                                  completion_tokens=rng.choice((None, 1, rng.randint(2, 500))),
                                  duration_ms=rng.choice((None, rng.uniform(100, 9000))), ttft_ms=stream_ttft)
        last = COMMANDS[0]
        for _ in range(rng.randint(0, 6)):
            # Retrying the last shape half the time makes runs and loops of every length.
            last = last if rng.random() < 0.5 else rng.choice(COMMANDS)
            request.call(last)


async def build(engine: AsyncEngine, *, seed: int = 3, batches: int = 7) -> Store:
    """Save the traffic in batches, each in a shuffled order, as several writers or replicas might."""
    store = Store()
    build_traffic(store, random.Random(seed))
    rows = {name: list(batch) for name, batch in store.rows.items()}
    rng = random.Random(seed + 1)
    for part in range(batches):
        for name, batch in rows.items():
            chunk = batch[part::batches]
            rng.shuffle(chunk)
            store.rows[name] = chunk
        await store.save(engine)
    store.rows = rows
    return store


def windows(rng: random.Random, n: int) -> list[Filters]:
    found = [Filters(), Filters(since=START + HOUR), Filters(until=START + 3 * HOUR),
             Filters(since=START + HOUR, until=START + HOUR + 1),  # one second
             Filters(policy="other"), Filters(route="responses", model="b")]
    for _ in range(n):
        since = START + rng.uniform(-HOUR, 12 * HOUR)
        until = since + rng.choice((rng.uniform(0, HOUR), rng.uniform(HOUR, 9 * HOUR)))
        found.append(Filters(since=since, until=until, model=rng.choice((None, "a")),
                             policy=rng.choice((None, "strict")), route=rng.choice((None, "chat"))))
    return found


def rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def raw_throughput(rows: list[dict[str, Any]], f: Filters) -> dict[str, list[dict[str, Any]]]:
    cells: dict[tuple[str, int], list[Any]] = {}
    for r in rows:
        if not _selected(r, r["started_at"], f):
            continue
        cell = cells.setdefault((r["model"], r["concurrency"]), [0, [], []])
        cell[0] += 1
        if r["completion_tokens"] is not None and (r["duration_ms"] or 0) > 0:
            cell[1].append(r["completion_tokens"] * 1000.0 / r["duration_ms"])
        if r["ttft_ms"] is not None:
            cell[2].append(r["ttft_ms"])
    out: dict[str, list[dict[str, Any]]] = {}
    for (model, level), (n, rates, ttfts) in sorted(cells.items()):
        out.setdefault(model, []).append({
            "concurrency": level, "requests": n,
            "completion_tokens_per_s": sum(rates) / len(rates) if rates else None,
            "ttft_ms": sum(ttfts) / len(ttfts) if ttfts else None})
    return out


def _selected(row: dict[str, Any], at: float, f: Filters) -> bool:
    return ((f.since is None or at >= f.since) and (f.until is None or at < f.until)
            and (f.model is None or row["model"] == f.model)
            and (f.policy is None or row["policy_name"] == f.policy)
            and (f.route is None or row["route"] == f.route))


async def test_rollups_and_edges_equal_the_rows_for_any_window(engine: AsyncEngine):
    store = await build(engine)
    cases = windows(random.Random(5), 25)
    # Whole hours alone, edges alone, and both together are all among the windows.
    kinds = {(figures.split(f).hours is not None, len(figures.split(f).edges)) for f in cases}
    assert {(True, 0), (False, 1), (True, 2)} <= kinds
    async with engine.connect() as conn:
        for f in cases:
            assert await figures.call_counts(conn, f) == await queries.call_counts_from_rows(conn, f), f
            assert await figures.reason_counts(conn, f) == await queries.reason_counts_from_rows(conn, f), f
            assert (await figures.primary_reason_counts(conn, f)
                    == await queries.primary_reason_counts_from_rows(conn, f)), f
            assert await figures.request_counts(conn, f) == await queries.request_counts_from_rows(conn, f), f
            assert await figures.attempt_histograms(conn, f) == await queries.attempt_histograms_from_rows(conn, f), f
            assert (rounded(await figures.throughput_by_concurrency(conn, f))
                    == rounded(raw_throughput(store.rows["requests"], f))), f


async def test_latency_bins_hold_every_streamed_request_once(engine: AsyncEngine):
    store = await build(engine)
    async with engine.connect() as conn:
        for f in windows(random.Random(9), 10):
            f = Filters(since=f.since, until=f.until, model=f.model)  # latency is per model and time only
            expected: dict[tuple[str, int], dict[str, list[float]]] = {}
            for r in store.rows["requests"]:
                if _selected(r, r["started_at"], f):
                    for kind, v in zip(("ttft", "tpot"), rollups.latency_values(r), strict=True):
                        if v is not None:
                            expected.setdefault((r["model"], r["concurrency"]), {}).setdefault(kind, []).append(v)
            found = await figures.latency_bins(conn, f)
            assert set(found) == set(expected), f
            for cell, kinds in expected.items():
                for kind, values in kinds.items():
                    bins = found[cell][kind]
                    assert sum(b.count for b in bins.values()) == len(values)
                    assert min(b.low for b in bins.values()) == pytest.approx(min(values))
                    assert max(b.high for b in bins.values()) == pytest.approx(max(values))


def reference_runs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs, found session by session over the calls sorted in memory."""
    by_session: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_session.setdefault(row["session_id"], []).append({
            **row, "shape_key": row["shape"] or row["primary_reason"] or row["decision"],
            "command_key": row["command"] or row["arguments_raw"]})
    found = []
    for calls in by_session.values():
        found += find_runs(sorted(calls, key=lambda c: (c["created_at"], c["call_index"])))
    return found


def run_keys(runs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((r["session_id"], r["start_at"], r["end_at"], r["attempts"], r["shape"], bool(r["exact"]),
                   r["next_decision"], r["next_at"]) for r in runs)


async def stored_runs(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        return [dict(r._mapping) for r in await conn.execute(select(error_runs))]


async def test_error_runs_kept_by_batches_out_of_order_equal_the_sessions_runs(engine: AsyncEngine):
    store = await build(engine, batches=11)
    expected = reference_runs(store.rows["tool_calls"])
    assert any(r["attempts"] >= 3 for r in expected) and any(not r["exact"] for r in expected)
    assert run_keys(await stored_runs(engine)) == run_keys(expected)
    async with engine.begin() as conn:
        await conn.run_sync(rollups.rebuild)
    assert run_keys(await stored_runs(engine)) == run_keys(expected)


async def test_a_call_landing_inside_a_finished_loop_splits_it(engine: AsyncEngine):
    store = Store()
    session = store.session("m")
    pipe, other_pipe = "uv run scripts/search.py | head -5", "uv run scripts/search.py | head -9"
    request = session.request()
    first = request.calls(pipe, other_pipe, pipe, pipe, ALLOWED)
    await store.save(engine)
    (loop,) = await stored_runs(engine)
    assert (loop["attempts"], loop["exact"], loop["next_decision"]) == (4, False, "allow")
    # A late call written between the second and third attempts, as a second replica might.
    request.call(ALLOWED, at=(first[1]["created_at"] + first[2]["created_at"]) / 2)
    await store.save(engine)
    runs = sorted(await stored_runs(engine), key=lambda r: r["start_at"])
    assert [(r["attempts"], r["next_decision"]) for r in runs] == [(2, "allow"), (2, "allow")]
    assert [r["exact"] for r in runs] == [False, True]


async def test_loops_and_recovery_come_from_whole_sessions(engine: AsyncEngine):
    """A window takes the runs that start in it, whole: a loop across its end is not cut in two."""
    store = Store()
    session = store.session("m")
    pipe = "uv run scripts/search.py | head -5"
    request = session.request()
    request.call(ALLOWED)
    store.now = START + HOUR - 2
    request.calls(pipe, pipe, pipe, ALLOWED)  # the loop starts two seconds before the hour, ends after it
    await store.save(engine)
    before = (await model_stats(engine, until=START + HOUR))["models"][0]
    after = (await model_stats(engine, since=START + HOUR))["models"][0]
    assert before["loops"] == {"count": 1, "max_attempts": 3, "mean_attempts": 3.0, "exact_repeats": 1}
    assert before["recovery_rate"] == pytest.approx(1 / 3)
    assert after["loops"]["count"] == 0 and after["recovery_rate"] is None
    (top,) = await top_loops(engine, until=START + HOUR)
    assert top["commands"] == [pipe] * 3 and top["attempts"] == 3


async def migrated_from_before_the_rollups(engine: AsyncEngine) -> Store:
    """A store that held rows before the rollups existed (revision 0004), then migrated to head."""
    await migrate(engine, "0004")
    store = Store()
    build_traffic(store, random.Random(11))
    async with engine.begin() as conn:
        for name in ("sessions", "requests", "tool_calls", "tool_call_reasons"):
            await conn.execute(insert(metadata.tables[name]), store.rows[name])
    await migrate(engine)
    return store


async def test_the_migration_builds_the_rollups_of_a_store_that_already_has_rows(empty_db_url: str):
    engine = create_engine(empty_db_url)
    try:
        store = await migrated_from_before_the_rollups(engine)
        assert run_keys(await stored_runs(engine)) == run_keys(reference_runs(store.rows["tool_calls"]))
        async with engine.connect() as conn:
            f = Filters()
            assert await figures.call_counts(conn, f) == await queries.call_counts_from_rows(conn, f)
            assert await figures.request_counts(conn, f) == await queries.request_counts_from_rows(conn, f)
            assert await figures.reason_counts(conn, f) == await queries.reason_counts_from_rows(conn, f)
    finally:
        await engine.dispose()


def test_latency_percentiles_are_exact_where_sparse_and_within_one_percent_where_dense():
    sparse = [float(v) for v in range(1, 101)]
    assert (percentile(sketch(sparse), 50), percentile(sketch(sparse), 99)) == (50.0, 99.0)
    assert percentile(sketch([]), 50) is None
    assert percentile(sketch([0.0, 0.0, 3.0]), 50) == 0.0
    rng = random.Random(1)
    dense = sorted(rng.lognormvariate(5, 1.2) for _ in range(20_000))
    for p in (1, 50, 90, 99):
        exact = dense[(len(dense) * p + 99) // 100 - 1]
        assert percentile(sketch(dense), p) == pytest.approx(exact, rel=0.01)
