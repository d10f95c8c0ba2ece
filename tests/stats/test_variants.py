"""Per feedback variant: recovery rate, loop rate and median attempts to an allowed call, with intervals."""

from __future__ import annotations

import pytest

from proxy.stats.confidence import bootstrap_median, wilson
from proxy.stats.variants import summarize_variant, variant_stats

from .builder import ALLOWED, PIPE, Store
from .test_loops import HEAD_10, TAIL_3
from .test_stats_api import ClientFactory, client_for  # noqa: F401 (fixture)

pytestmark = pytest.mark.each_database


def _calls(*decisions: str) -> list[dict]:
    shapes = {"allow": None, "reject": "pipe", "curl": "program:curl"}
    return [{"decision": "allow" if d == "allow" else "reject", "shape_key": shapes[d]} for d in decisions]


def test_summarize_variant_by_construction() -> None:
    sessions = [
        _calls("reject", "allow"),                      # one run of 1, recovered in 2 attempts
        _calls("reject", "reject", "reject", "allow"),  # a loop of 3, recovered in 4
        _calls("reject", "curl", "allow", "reject"),    # two runs (shapes differ), then a last unfollowed error
    ]
    figures = summarize_variant(sessions, loop_min_attempts=3)
    # errors followed by a call: 1 + 3 + 2 = 6, followed by an allowed call: 1 + 1 + 1 = 3
    assert figures["recovery_rate"] == 0.5 and figures["recovery_rate_ci95"] == [round(x, 4) for x in wilson(3, 6)]
    assert (figures["error_runs"], figures["loop_rate"]) == (5, 0.2)
    assert figures["median_attempts"] == 2.0  # runs ending allowed: 2, 4, 2
    assert figures["median_attempts_ci95"] == [round(x, 4) for x in bootstrap_median([2, 4, 2])]
    assert summarize_variant([], 3)["recovery_rate"] is None


async def test_variant_route(engine, store: Store, client_for: ClientFactory) -> None:  # noqa: F811
    plain = store.session("qwen3.6-35b-a3b", "ses_plain")
    plain.request().calls(PIPE, HEAD_10, TAIL_3, ALLOWED)
    suggest = store.session("qwen3.6-35b-a3b", "ses_suggest")
    suggest.request().calls(PIPE, ALLOWED)
    store.session("qwen3.6-35b-a3b", "ses_none").request().calls(PIPE, ALLOWED)  # not in the experiment
    for row in store.rows["tool_calls"]:
        in_experiment = row["session_id"] != "ses_none"
        row["feedback_variant"] = row["session_id"].removeprefix("ses_") if in_experiment else None
    await store.save(engine)
    body = (await client_for().get("/stats/variants")).json()
    assert [(v["variant"], v["sessions"], v["loop_rate"], v["median_attempts"]) for v in body["variants"]] == [
        ("plain", 1, 1.0, 4.0), ("suggest", 1, 0.0, 2.0)]
    direct = await variant_stats(engine, loop_min_attempts=4)
    assert [v["loop_rate"] for v in direct["variants"]] == [0.0, 0.0]
