"""GET /stats/overview's parts on SQLite and Postgres: the error rate per time bucket over a range, and loops
grouped by model and shape with their lengths and sessions."""

from __future__ import annotations

import pytest

from proxy.stats.overview import error_timeline, loop_groups

from .builder import ALLOWED, PIPE, START, Store

pytestmark = pytest.mark.each_database


async def test_the_timeline_counts_each_bucket_of_the_range(engine, store: Store):
    request = store.session("dense").request()
    request.call(PIPE, at=START + 10)
    request.call(ALLOWED, at=START + 20)
    request.call(ALLOWED, at=START + 70)  # the next minute
    store.session("moe").request().call(PIPE, at=START + 30)
    store.session("dense").request().call(PIPE, at=START - 7200)  # before the hour
    await store.save(engine)

    hour = await error_timeline(engine, "1h", now=START + 90)
    assert hour["bucket_seconds"] == 60 and hour["since"] <= START - 3600 + 90
    dense = {b["start"] - START: (b["calls"], b["errors"]) for b in hour["models"]["dense"]}
    assert dense == {0: (2, 1), 60: (1, 0)}
    assert [(b["calls"], b["error_rate"]) for b in hour["models"]["moe"]] == [(1, 1.0)]

    everything = await error_timeline(engine, "all", now=START + 90)
    assert sum(b["calls"] for b in everything["models"]["dense"]) == 4
    assert everything["since"] <= START - 7200

    with pytest.raises(Exception, match="range must be one of"):
        await error_timeline(engine, "2w")


async def test_loops_are_grouped_by_model_and_shape(engine, store: Store):
    for session_id, tries in (("ses_a", 3), ("ses_b", 4), ("ses_c", 3)):
        store.session("moe", session_id).request().calls(*[PIPE] * tries)
    store.session("dense", "ses_d").request().calls(PIPE, PIPE)  # too short to be a loop
    await store.save(engine)
    (group,) = await loop_groups(engine, min_attempts=3)
    assert (group["model"], group["shape"], group["loops"], group["lengths"]) == ("moe", "pipe", 3, {"3": 2, "4": 1})
    assert {s["session_id"] for s in group["sessions"]} == {"ses_a", "ses_b", "ses_c"}
