"""`model_stats` over a real migrated SQLite store whose figures are known by construction."""

from __future__ import annotations

import pytest

from proxy.stats.models import model_stats, seed_table

from .builder import ALLOWED, PIPE, START, Store
from .seed_data import SEED, SEED_TABLE, build_seed

pytestmark = pytest.mark.each_database

MODEL_KEYS = {"model", "sessions", "requests", "tool_calls", "errors", "error_rate", "reasons",
              "primary_reasons", "loops", "recovery_rate", "median_attempts", "throughput",
              "error_rate_ci95", "error_rate_session_ci95", "recovery_rate_ci95", "recovery_rate_session_ci95",
              "ungoverned_text_actions", "blocked_turns", "blocked_rate", "upstream_errors", "secrets_redacted"}


async def test_seed_table_is_exact(engine, store: Store):
    build_seed(store)
    await store.save(engine)
    stats = await model_stats(engine)
    assert seed_table(stats).splitlines() == SEED_TABLE
    by_model = {m["model"]: m for m in stats["models"]}
    for model, sessions, calls, errors in SEED:
        got = by_model[model]
        assert (got["sessions"], got["tool_calls"], got["errors"]) == (sessions, calls, errors)
        assert got["error_rate"] == pytest.approx(errors / calls)
        # Each error is followed by an allowed call of its session: nothing loops, everything recovers.
        assert got["loops"] == {"count": 0, "max_attempts": 0, "mean_attempts": None, "exact_repeats": 0}
        assert got["recovery_rate"] == 1.0


async def test_reason_counts_count_every_code_of_a_call(engine, store: Store):
    expected = build_seed(store)
    await store.save(engine)
    stats = await model_stats(engine)
    by_model = {m["model"]: m for m in stats["models"]}
    for model, reasons in expected.items():
        assert by_model[model]["reasons"] == reasons
    # 9 errors cycling pipe, wrapper, cd+chain, malformed: `cd` calls count under both their codes.
    small = by_model["qwen3.5-9b"]
    assert small["reasons"] == {"pipe": 3, "wrapper": 2, "cd": 2, "chain": 2, "bad_arguments": 2}
    assert small["primary_reasons"] == {"pipe": 3, "wrapper": 2, "cd": 2, "bad_arguments": 2}
    assert sum(small["primary_reasons"].values()) == small["errors"]


async def test_json_shape_is_pinned(engine, store: Store):
    request = store.session("m").request(completion_tokens=50, duration_ms=500.0, ttft_ms=40.0, concurrency=2)
    request.calls(ALLOWED, PIPE)
    await store.save(engine)
    stats = await model_stats(engine, since=1.0, until=2e9)
    assert set(stats) == {"window", "models"}
    assert stats["window"] == {"since": 1.0, "until": 2e9}
    (m,) = stats["models"]
    assert set(m) == MODEL_KEYS
    assert set(m["loops"]) == {"count", "max_attempts", "mean_attempts", "exact_repeats"}
    assert m["throughput"]["by_concurrency"] == [
        {"concurrency": 2, "requests": 1, "completion_tokens_per_s": 100.0, "ttft_ms": 40.0}]
    assert m["recovery_rate"] is None  # the pipe is the session's last call: nothing followed it


async def test_empty_store(engine):
    assert await model_stats(engine) == {"window": {"since": None, "until": None}, "models": []}


async def test_median_attempts_from_the_histogram(engine, store: Store):
    odd, even = store.session("odd"), store.session("even")
    for attempts in (1, 1, 4, 2, 1):
        odd.request(attempts=attempts)
    for attempts in (1, 4, 2, 1):
        even.request(attempts=attempts)
    await store.save(engine)
    by_model = {m["model"]: m for m in (await model_stats(engine))["models"]}
    assert by_model["odd"]["median_attempts"] == 1
    assert by_model["even"]["median_attempts"] == 1.5
    assert by_model["even"]["requests"] == 4 and by_model["even"]["tool_calls"] == 0
    assert by_model["even"]["error_rate"] is None


async def test_throughput_per_concurrency_level(engine, store: Store):
    s = store.session("m")
    s.request(concurrency=1, completion_tokens=100, duration_ms=1000.0, ttft_ms=10.0)
    s.request(concurrency=1, completion_tokens=300, duration_ms=1000.0, ttft_ms=30.0)
    s.request(concurrency=4, completion_tokens=80, duration_ms=2000.0, ttft_ms=None)
    s.request(concurrency=4, completion_tokens=None, duration_ms=None, ttft_ms=None)  # an upstream error
    await store.save(engine)
    (m,) = (await model_stats(engine))["models"]
    assert m["throughput"]["by_concurrency"] == [
        {"concurrency": 1, "requests": 2, "completion_tokens_per_s": 200.0, "ttft_ms": 20.0},
        {"concurrency": 4, "requests": 2, "completion_tokens_per_s": 40.0, "ttft_ms": None},
    ]


async def test_sessions_count_distinct_sessions_of_the_model(engine, store: Store):
    a, b = store.session("m"), store.session("m")
    for _ in range(3):
        a.request().call(ALLOWED)
    b.request().call(PIPE)
    await store.save(engine)
    (m,) = (await model_stats(engine))["models"]
    assert (m["sessions"], m["requests"], m["tool_calls"], m["errors"]) == (2, 4, 4, 1)


class TestFilters:
    @pytest.fixture
    async def seeded(self, engine, store: Store):
        """Model m: 4 calls in hour 0 (1 error), 6 in hour 1 (3 errors, 2 under policy `other`, on route
        `completions`); model n: 2 calls in hour 1, both allowed."""
        early = store.session("m")
        early.request(at=START).calls(ALLOWED, PIPE, ALLOWED, ALLOWED)
        store.now = START + 3600
        late = store.session("m")
        late.request(at=START + 3600).calls(PIPE, ALLOWED, ALLOWED, PIPE)
        other = store.session("m", policy="other", route="completions")
        other.request(at=START + 3600).calls(PIPE, ALLOWED)
        store.session("n").request(at=START + 3600).calls(ALLOWED, ALLOWED)
        await store.save(engine)
        return engine

    @staticmethod
    def figures(stats):
        return {m["model"]: (m["requests"], m["tool_calls"], m["errors"]) for m in stats["models"]}

    async def test_no_filter(self, seeded):
        assert self.figures(await model_stats(seeded)) == {"m": (3, 10, 4), "n": (1, 2, 0)}

    async def test_since_is_inclusive_and_until_exclusive(self, seeded):
        assert self.figures(await model_stats(seeded, until=START + 3600)) == {"m": (1, 4, 1)}
        assert self.figures(await model_stats(seeded, since=START + 3600)) == {"m": (2, 6, 3), "n": (1, 2, 0)}
        # The first call is at START exactly, the second at START + 1.
        cut = await model_stats(seeded, since=START + 1, until=START + 3600)
        assert self.figures(cut) == {"m": (0, 3, 1)}

    async def test_model(self, seeded):
        assert self.figures(await model_stats(seeded, model="n")) == {"n": (1, 2, 0)}
        assert (await model_stats(seeded, model="nope"))["models"] == []

    async def test_policy(self, seeded):
        stats = await model_stats(seeded, policy="other")
        assert self.figures(stats) == {"m": (1, 2, 1)}
        assert stats["models"][0]["reasons"] == {"pipe": 1}

    async def test_route(self, seeded):
        stats = await model_stats(seeded, route="chat", model="m")
        assert self.figures(stats) == {"m": (2, 8, 3)}
        assert stats["models"][0]["reasons"] == {"pipe": 3}

    async def test_window_cuts_reason_counts_too(self, seeded):
        stats = await model_stats(seeded, since=START + 3600, model="m")
        assert stats["models"][0]["reasons"] == {"pipe": 3}
