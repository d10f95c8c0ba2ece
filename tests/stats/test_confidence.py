"""Intervals and tests against published reference values, the session bootstrap on data with known
clustering, and the comparison through `/stats/compare` and `stats --compare` on the seed's counts."""

from __future__ import annotations

import json

import pytest

from proxy.stats.compare import compare_counts
from proxy.stats.confidence import (
    bootstrap_ratio,
    fisher_exact,
    newcombe_difference,
    permutation_difference,
    wilson,
)
from proxy.stats.models import model_stats

from .builder import ALLOWED, PIPE, Store
from .seed_data import build_seed
from .test_stats_api import ClientFactory, assert_error_shape, client_for  # noqa: F401 (fixture)
from .test_stats_cli import cli, seeded  # noqa: F401 (fixture)

pytestmark = pytest.mark.each_database


def _close(got: tuple[float, float] | None, want: tuple[float, float], places: int = 4) -> bool:
    return got is not None and all(round(g, places) == w for g, w in zip(got, want, strict=True))


def test_wilson_reference_values() -> None:
    # Newcombe (1998), Statistics in Medicine 17:857, table I: 81/263 -> 0.2553 to 0.3662; 0/10 -> 0 to 0.2775.
    assert _close(wilson(81, 263), (0.2553, 0.3662))
    assert _close(wilson(15, 148), (0.0624, 0.1605))
    assert _close(wilson(0, 10), (0.0, 0.2775))
    assert _close(wilson(1, 29), (0.0061, 0.1718))
    assert wilson(0, 0) is None


def test_newcombe_difference_reference_values() -> None:
    # Newcombe (1998), Statistics in Medicine 17:873, method 10: 56/70 - 48/80 -> 0.0524 to 0.3339.
    assert _close(newcombe_difference(56, 70, 48, 80), (0.0524, 0.3339))
    assert _close(newcombe_difference(9, 10, 3, 10), (0.1705, 0.8090))


def test_fisher_reference_values() -> None:
    # Fisher's tea-tasting table, and the seed's counts as the issue gives them (R fisher.test agrees).
    assert round(fisher_exact(3, 1, 1, 3), 4) == 0.4857
    assert round(fisher_exact(9, 161 - 9, 19, 158 - 19), 3) == 0.049
    assert round(fisher_exact(9, 161 - 9, 13, 128 - 13), 2) == 0.18
    assert fisher_exact(0, 10, 0, 10) == 1.0
    assert fisher_exact(10, 0, 0, 10) == pytest.approx(1.0825088224469026e-05)


def test_session_bootstrap_widens_with_clustering() -> None:
    # The same 50 errors in 1000 calls: spread over 100 sessions, or packed into 5 looping sessions.
    spread = [(1, 10)] * 50 + [(0, 10)] * 50
    packed = [(10, 10)] * 5 + [(0, 10)] * 95
    calls = wilson(50, 1000)
    a, b = bootstrap_ratio(spread), bootstrap_ratio(packed)
    assert a is not None and b is not None and calls is not None
    assert a[0] <= 0.05 <= a[1] and b[0] <= 0.05 <= b[1]
    assert (b[1] - b[0]) > 2 * (calls[1] - calls[0])  # clustered: far wider than the per-call interval
    assert (b[1] - b[0]) > 2 * (a[1] - a[0])
    assert bootstrap_ratio(packed) == b  # seeded: the same data gives the same interval
    assert bootstrap_ratio([]) is None


def test_permutation_test_sees_clustering() -> None:
    # 5 % vs 10 % over 1000 calls each: clear per call, not once the errors come in whole looping sessions.
    spread_a, spread_b = [(1, 20)] * 50, [(2, 20)] * 50
    packed_a, packed_b = [(20, 20)] * 2 + [(0, 20)] * 48 + [(10, 20)], [(20, 20)] * 5 + [(0, 20)] * 45
    assert permutation_difference(spread_a, spread_b) < 0.001
    assert permutation_difference(packed_a[:50], packed_b) > 0.2
    assert permutation_difference([], spread_b) is None


def test_compare_counts_sentences() -> None:
    calls = lambda k, n: [(1, 1)] * k + [(0, 1)] * (n - k)  # noqa: E731 - one call per session
    higher = compare_counts(("qwen3.5-9b", calls(9, 161)), ("qwen3.6-35b-a3b", calls(19, 158)))
    # One call per session: the session test is a Monte Carlo twin of the exact one, p close to 0.049 too.
    assert round(higher["p_value_calls"], 3) == 0.049 and 0.03 < higher["p_value_sessions"] < 0.07
    assert higher["established"] == (higher["p_value_sessions"] < 0.05)
    assert "(12.0 % vs 5.6 %)" in higher["sentence"] and "p = 0.049 over calls, " in higher["sentence"]
    assert higher["sentence"].startswith("qwen3.6-35b-a3b's error rate ")
    clear = compare_counts(("a", [(1, 4)] * 10 + [(0, 4)] * 30), ("b", [(3, 4)] * 30 + [(0, 4)] * 10))
    assert clear["established"] and clear["sentence"].startswith("b's error rate is higher than a's (56.2 % vs")
    unclear = compare_counts(("qwen3.5-9b", calls(9, 161)), ("qwen3.5-27b", calls(13, 128)))
    assert round(unclear["p_value_calls"], 2) == 0.18 and not unclear["established"]
    assert "is not established: p = 0.18 over calls" in unclear["sentence"]
    empty = compare_counts(("a", calls(1, 2)), ("b", []))
    assert empty["sentence"] == "No comparison: b has no tool calls in the window." and not empty["established"]


async def test_model_stats_carry_intervals(engine, store: Store) -> None:
    build_seed(store)
    await store.save(engine)
    models = {m["model"]: m for m in (await model_stats(engine))["models"]}
    m = models["qwen3.5-9b"]
    assert m["error_rate_ci95"] == [round(x, 4) for x in wilson(9, 161)]
    low, high = m["error_rate_session_ci95"]
    assert low <= m["error_rate"] <= high
    assert m["recovery_rate"] == 1.0 and m["recovery_rate_ci95"][1] == 1.0


async def test_compare_route(engine, store: Store, client_for: ClientFactory) -> None:  # noqa: F811
    build_seed(store)
    await store.save(engine)
    client = client_for()
    body = (await client.get("/stats/compare", params={"models": "qwen3.5-9b,qwen3.6-35b-a3b"})).json()
    assert [m["model"] for m in body["models"]] == ["qwen3.5-9b", "qwen3.6-35b-a3b"]
    assert [(m["errors"], m["tool_calls"], m["sessions"]) for m in body["models"]] == [(9, 161, 21), (19, 158, 20)]
    assert round(body["p_value_calls"], 3) == 0.049
    lo, hi = body["difference_ci95"]
    assert lo < body["difference"] < hi < 0
    assert set(body) >= {"difference", "difference_ci95", "p_value_calls", "p_value_sessions", "sentence",
                         "established", "window"}
    body = (await client.get("/stats/compare", params={"models": "qwen3.5-9b,qwen3.5-27b"})).json()
    assert round(body["p_value_calls"], 2) == 0.18 and not body["established"]
    assert "not established" in body["sentence"]
    for bad in ({}, {"models": "a"}, {"models": "a,a"}, {"models": "a,b,c"}):
        response = await client.get("/stats/compare", params=bad)
        assert response.status_code == 400
        assert_error_shape(response.json(), "invalid_request_error")


async def test_stats_compare_cli(capsys, seeded: str) -> None:  # noqa: F811
    code, out, _ = await cli(capsys, "stats", "--db", seeded, "--compare", "qwen3.5-9b,qwen3.5-27b")
    assert code == 0
    # The fixture adds a looping session to qwen3.5-9b: 12/165 against 13/128.
    assert "difference (a - b)" in out and out.strip().splitlines()[-1].startswith(
        "The difference between qwen3.5-27b's and qwen3.5-9b's error rates (10.2 % vs 7.3 %) is not established")
    code, out, _ = await cli(capsys, "stats", "--db", seeded, "--compare", "qwen3.5-9b,qwen3.6-35b-a3b", "--json")
    body = json.loads(out)
    assert code == 0 and [m["errors"] for m in body["models"]] == [12, 19]
    code, _, err = await cli(capsys, "stats", "--db", seeded, "--compare", "qwen3.5-9b")
    assert code == 2 and "two different model names" in err


def test_many_sessions_use_the_cluster_robust_normal_interval() -> None:
    # Past BOOTSTRAP_MAX_SESSIONS the resampling would cost too much; its normal limit is used instead,
    # and it agrees with the bootstrap where both apply.
    from proxy.stats.confidence import BOOTSTRAP_MAX_SESSIONS, cluster_normal_ratio

    few = [(10, 10)] * 10 + [(0, 10)] * 190
    assert len(few) <= BOOTSTRAP_MAX_SESSIONS
    boot, normal = bootstrap_ratio(few), cluster_normal_ratio(few)
    assert abs(boot[0] - normal[0]) < 0.01 and abs(boot[1] - normal[1]) < 0.01
    many = few * 5
    assert bootstrap_ratio(many) == cluster_normal_ratio(many)
    low, high = bootstrap_ratio(many)
    calls = wilson(500, 10_000)
    assert low < 0.05 < high and (high - low) > 3 * (calls[1] - calls[0])
    assert permutation_difference(many, [(0, 10)] * 1000) < 1e-6


async def test_session_counts_from_rollups_equal_the_rows(engine, store: Store) -> None:
    from proxy.store import figures, queries
    from proxy.store.queries import Filters

    from .builder import START

    build_seed(store)  # 447 calls one second apart: about 7.5 minutes
    for hour in range(3):  # and sessions spread over three more hours
        store.now = START + 3600 * (hour + 1) + 1800
        store.session("qwen3.5-9b").request().calls(PIPE, ALLOWED)
    await store.save(engine)
    async with engine.connect() as conn:
        for since, until in ((None, None), (START + 100, START + 3 * 3600 + 2000), (START + 3700, None)):
            f = Filters(since=since, until=until)
            rolled = await figures.session_error_counts(conn, f)
            rows = await queries.session_error_counts_from_rows(conn, f)
            assert {m: sorted(v) for m, v in rolled.items()} == {m: sorted(v) for m, v in rows.items()}


def _reference() -> dict:
    import json
    from pathlib import Path

    return json.loads((Path(__file__).parent / "data" / "stats_reference.json").read_text())


def test_fisher_agrees_with_scipy_at_any_size() -> None:
    # scipy's values (scripts/stats_oracle_reference.py), up to 2.2e7 calls; below P_FLOOR the floor.
    from proxy.stats.confidence import P_FLOOR

    for row in _reference()["fisher"]:
        assert fisher_exact(*row["table"]) == pytest.approx(max(row["p"], P_FLOOR), rel=1e-10), row
    assert fisher_exact(242_000, 10_758_000, 1_078_000, 9_922_000) == P_FLOOR  # never 0.0


def test_large_store_verdict_and_sentence_agree() -> None:
    # 2,000 sessions of 10 calls per model, 2.2 % vs 9.8 %: both p-values far below what a double holds.
    a = [(1, 10)] * 440 + [(0, 10)] * 1560
    b = [(1, 10)] * 1960 + [(0, 10)] * 40
    result = compare_counts(("a", a), ("b", b))
    assert result["p_value_calls"] > 0 and result["p_value_sessions"] > 0  # floored, never 0.0
    assert result["established"] and result["verdict_sessions"] == "below"
    assert result["sentence"].startswith("b's error rate is higher than a's (9.8 % vs 2.2 %)")
    assert "< 1e-300 over sessions" in result["sentence"]


# Sessions whose permutation p is within a Monte Carlo error of 0.05 (about 0.050 with 50,000 draws).
NEAR_A = [(1, 2), (1, 6), (0, 1), (2, 1), (1, 5), (0, 5), (0, 1), (0, 4), (1, 1), (0, 1), (2, 4), (0, 5), (0, 2),
          (2, 6), (2, 1), (2, 5), (1, 1), (0, 1), (2, 2), (1, 4), (0, 5), (0, 5), (1, 5), (2, 2), (0, 5), (2, 6),
          (0, 3), (0, 5), (2, 1), (2, 1), (2, 2), (1, 6), (2, 4), (1, 4), (2, 4), (1, 3), (0, 2), (2, 2), (0, 5),
          (1, 5)]
NEAR_B = [(2, 3), (3, 4), (2, 5), (1, 1), (3, 4), (1, 3), (1, 4), (2, 1), (3, 1), (3, 5), (2, 3), (3, 3), (3, 4),
          (3, 4), (1, 1), (2, 4), (2, 6), (0, 1), (2, 6), (1, 6), (2, 6), (1, 3), (2, 4), (2, 3), (0, 4), (1, 2),
          (2, 1), (1, 1), (0, 3), (0, 6), (0, 4), (1, 4), (0, 2), (1, 4), (2, 3), (0, 4), (2, 3), (2, 4), (1, 6),
          (1, 2)]


def test_permutation_verdict_does_not_depend_on_the_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.stats import confidence

    monkeypatch.setattr(confidence, "MAX_PERMUTATION_WORK", 1_200_000)  # 15,000 draws: keeps the test quick
    verdicts = set()
    for seed in (None, 1, 2, 3):
        found = confidence.permutation_test(NEAR_A, NEAR_B, seed=seed)
        assert found is not None and found.method == "monte carlo" and 0 < found.mc_error < 0.003
        verdicts.add("undecided" if not found.settled else found.p < 0.05)
    assert verdicts == {"undecided"}
    result = compare_counts(("a", NEAR_A), ("b", NEAR_B))
    assert result["verdict_sessions"] == "undecided" and not result["established"]
    assert result["p_value_sessions_mc_error"] > 0 and "Monte Carlo error 0.00" in result["sentence"]
    assert "undecided" in result["sentence"]
    # Far from 0.05 the first batch settles it, and the same data gives the same figures.
    clear = confidence.permutation_test(NEAR_A, NEAR_B[:20] + [(0, 5)] * 20)
    assert clear is not None and clear.settled and clear.draws == confidence.DRAW_BATCH
    assert clear == confidence.permutation_test(list(reversed(NEAR_A)), NEAR_B[:20] + [(0, 5)] * 20)


def test_exact_permutation_on_the_seed_counts() -> None:
    # One call per session: the exact permutation p equals the hypergeometric sum scipy gives.
    from proxy.stats.confidence import permutation_test

    ref = _reference()["seed_permutation"]
    calls = lambda k, n: [(1, 1)] * k + [(0, 1)] * (n - k)  # noqa: E731
    found = permutation_test(calls(*ref["first"]), calls(*ref["second"]))
    assert found is not None and found.method == "exact" and found.mc_error == 0.0
    assert found.p == pytest.approx(ref["p"], rel=1e-10)


def test_session_intervals_never_collapse() -> None:
    # Every session at one rate: the bootstrap alone gives a point; the Wilson interval over sessions bounds it.
    assert bootstrap_ratio([(3, 3)] * 13) == pytest.approx((0.7719, 1.0), abs=1e-4)
    assert bootstrap_ratio([(0, 5)] * 13) == pytest.approx((0.0, 0.2281), abs=1e-4)
    low, high = bootstrap_ratio([(1, 2)] * 10)
    assert low < 0.5 < high
    low, high = bootstrap_ratio([(0, 4)])  # one session
    assert low == 0.0 and high > 0.5
    for many in ([(0, 1)] * 1000, [(2, 2)] * 1000):  # the normal interval past BOOTSTRAP_MAX_SESSIONS too
        low, high = bootstrap_ratio(many)
        assert 0 < high - low < 0.005
