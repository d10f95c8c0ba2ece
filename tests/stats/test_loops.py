"""Retry-variant loops and recovery: constructed sessions, and a reference model checked on random traffic."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.policy import judge_call
from proxy.stats.models import model_stats, session_detail, top_loops
from proxy.store.db import create_engine, migrate
from tests.databases import BACKENDS, database_url

from .builder import ALLOWED, PIPE, STRICT, Store

pytestmark = pytest.mark.each_database

HEAD_10 = "uv run scripts/search.py | head -10"
TAIL_3 = "uv run scripts/search.py | tail -3"
TIMEOUT = "timeout 30 uv run scripts/search.py"
CHAIN = "uv run scripts/search.py; ls"
CURL = "curl -s https://example.com"


async def loops_of(engine, model: str = "m", **kw):
    (m,) = [m for m in (await model_stats(engine, **kw))["models"] if m["model"] == model]
    return m["loops"], m["recovery_rate"]


async def test_pipe_variants_then_an_allowed_call_are_one_loop_of_three(engine, store: Store):
    store.session("m").request().calls(PIPE, HEAD_10, TAIL_3, ALLOWED)
    await store.save(engine)
    loops, recovery = await loops_of(engine)
    assert loops == {"count": 1, "max_attempts": 3, "mean_attempts": 3.0, "exact_repeats": 0}
    assert recovery == pytest.approx(1 / 3)  # pipe->pipe, pipe->pipe, pipe->allowed


async def test_exact_repeats_are_counted_apart(engine, store: Store):
    store.session("m").request().calls(TIMEOUT, TIMEOUT, TIMEOUT, TIMEOUT)
    store.session("m").request().calls(CURL, "curl https://example.com", CURL)
    await store.save(engine)
    loops, recovery = await loops_of(engine)
    assert loops == {"count": 2, "max_attempts": 4, "mean_attempts": 3.5, "exact_repeats": 1}
    assert recovery == 0.0


async def test_an_allowed_call_breaks_the_run(engine, store: Store):
    store.session("m").request().calls(PIPE, HEAD_10, ALLOWED, TAIL_3, PIPE)
    await store.save(engine)
    loops, recovery = await loops_of(engine)
    assert loops["count"] == 0
    assert recovery == pytest.approx(1 / 3)  # the last pipe has no next call


async def test_a_different_shape_breaks_the_run(engine, store: Store):
    store.session("m").request().calls(PIPE, HEAD_10, TIMEOUT, CHAIN, TAIL_3, PIPE)
    await store.save(engine)
    loops, _ = await loops_of(engine)
    assert loops["count"] == 0


async def test_runs_join_across_requests_of_one_session(engine, store: Store):
    session = store.session("m")
    session.request(attempts=2).calls(PIPE, HEAD_10)
    session.request().calls(TAIL_3, PIPE)
    await store.save(engine)
    loops, _ = await loops_of(engine)
    assert loops == {"count": 1, "max_attempts": 4, "mean_attempts": 4.0, "exact_repeats": 0}


async def test_interleaved_sessions_do_not_join(engine, store: Store):
    a, b = store.session("m"), store.session("m")
    ra, rb = a.request(), b.request()
    for command in (PIPE, HEAD_10, TAIL_3):
        ra.call(command)
        rb.call(ALLOWED)
    rb.call(PIPE)
    rb.call(PIPE)
    await store.save(engine)
    loops, _ = await loops_of(engine)
    assert loops == {"count": 1, "max_attempts": 3, "mean_attempts": 3.0, "exact_repeats": 0}


async def test_malformed_calls_loop_too(engine, store: Store):
    request = store.session("m").request()
    for raw in ('{"command": "uv', '{"command": "uv run', '{"command"'):
        request.call(raw=raw)
    await store.save(engine)
    loops, _ = await loops_of(engine)
    assert loops == {"count": 1, "max_attempts": 3, "mean_attempts": 3.0, "exact_repeats": 0}


async def test_parallel_calls_order_by_call_index(engine, store: Store):
    # One attempt's calls share a timestamp (to the microsecond); call_index orders them.
    request = store.session("m").request()
    t = store.now
    request.call(PIPE, call_index=2, at=t)
    request.call(ALLOWED, call_index=1, at=t)
    request.call(HEAD_10, call_index=0, at=t)
    request.call(TAIL_3, call_index=0, at=t + 1)
    await store.save(engine)
    # In order: pipe, allowed, pipe, pipe: the allowed call breaks it, so no loop of 3.
    loops, recovery = await loops_of(engine)
    assert loops["count"] == 0
    assert recovery == pytest.approx(1 / 2)


async def test_threshold_is_a_parameter(engine, store: Store):
    store.session("m").request().calls(PIPE, HEAD_10, ALLOWED, TIMEOUT, TIMEOUT, TIMEOUT, TIMEOUT, TIMEOUT)
    await store.save(engine)
    assert (await loops_of(engine))[0]["count"] == 1
    two = (await model_stats(engine, loop_min_attempts=2))["models"][0]["loops"]
    assert two == {"count": 2, "max_attempts": 5, "mean_attempts": 3.5, "exact_repeats": 1}
    six = (await model_stats(engine, loop_min_attempts=6))["models"][0]["loops"]
    assert six["count"] == 0


async def test_observe_and_enforce_give_the_same_loops(engine, store: Store):
    # Enforce: the proxy retries within one client request (attempts 1..3). Observe: the rejected calls reach
    # the harness, which refuses them itself, and the model's retries arrive as the session's next requests.
    enforce = store.session("enforced", mode="enforce").request(attempts=4)
    for attempt, command in enumerate((PIPE, HEAD_10, TAIL_3, ALLOWED), start=1):
        enforce.call(command, attempt=attempt)
    observe = store.session("observed", mode="observe")
    for command in (PIPE, HEAD_10, TAIL_3, ALLOWED):
        observe.request().call(command)
    await store.save(engine)
    by_model = {m["model"]: m for m in (await model_stats(engine))["models"]}
    assert by_model["enforced"]["loops"] == by_model["observed"]["loops"] == {
        "count": 1, "max_attempts": 3, "mean_attempts": 3.0, "exact_repeats": 0}
    recovery = {m: by_model[m]["recovery_rate"] for m in ("enforced", "observed")}
    assert recovery == {"enforced": pytest.approx(1 / 3), "observed": pytest.approx(1 / 3)}


async def test_session_detail_marks_loop_members(engine, store: Store):
    session = store.session("m", "ses_detail")
    session.request().calls(ALLOWED, PIPE, HEAD_10)
    session.request().calls(TAIL_3, ALLOWED, TIMEOUT, TIMEOUT, TIMEOUT, CURL)
    store.session("m").request().calls(PIPE, PIPE, PIPE)  # another session's loop stays out
    await store.save(engine)
    detail = await session_detail(engine, "ses_detail")
    assert detail is not None
    assert (detail["requests"], detail["tool_calls"], detail["errors"]) == (2, 9, 7)
    assert [c["decision"] for c in detail["calls"]] == ["allow"] + ["reject"] * 3 + ["allow"] + ["reject"] * 4
    assert [c["command"] for c in detail["calls"]] == [
        ALLOWED, PIPE, HEAD_10, TAIL_3, ALLOWED, TIMEOUT, TIMEOUT, TIMEOUT, CURL]
    marks = [(c["loop"]["number"], c["loop"]["position"], c["loop"]["attempts"]) if c["loop"] else None
             for c in detail["calls"]]
    assert marks == [None, (1, 1, 3), (1, 2, 3), (1, 3, 3), None, (2, 1, 3), (2, 2, 3), (2, 3, 3), None]
    assert detail["calls"][5]["reasons"] == ["wrapper"] and detail["calls"][5]["shape"] == "wrapper:timeout"
    assert [(lp["number"], lp["shape"], lp["attempts"], lp["exact_repeat"]) for lp in detail["loops"]] == [
        (1, "pipe", 3, False), (2, "wrapper:timeout", 3, True)]
    assert detail["loops"][0]["commands"] == [PIPE, HEAD_10, TAIL_3]
    longer = await session_detail(engine, "ses_detail", loop_min_attempts=4)
    assert longer is not None and longer["loops"] == [] and all(c["loop"] is None for c in longer["calls"])


async def test_session_detail_of_unknown_session_is_none(engine, store: Store):
    store.session("m", "ses_known")  # a session row without requests yet is still known
    await store.save(engine)
    assert await session_detail(engine, "ses_nope") is None
    known = await session_detail(engine, "ses_known")
    assert known is not None and known["calls"] == [] and known["requests"] == 0


async def test_top_loops_longest_first_with_commands(engine, store: Store):
    store.session("a", "ses_a").request().calls(PIPE, HEAD_10, TAIL_3)
    store.session("b", "ses_b").request().calls(TIMEOUT, TIMEOUT, TIMEOUT, TIMEOUT, TIMEOUT, ALLOWED)
    store.session("a", "ses_c").request().calls(CURL, CURL, CURL, CURL, PIPE, PIPE)
    await store.save(engine)
    loops = await top_loops(engine)
    assert [(lp["session_id"], lp["attempts"], lp["shape"], lp["exact_repeat"]) for lp in loops] == [
        ("ses_b", 5, "wrapper:timeout", True),
        ("ses_c", 4, "program:curl", True),
        ("ses_a", 3, "pipe", False),
    ]
    assert loops[2]["commands"] == [PIPE, HEAD_10, TAIL_3]
    assert loops[0]["commands"] == [TIMEOUT] * 5
    assert [lp["session_id"] for lp in await top_loops(engine, limit=1)] == ["ses_b"]
    assert [lp["session_id"] for lp in await top_loops(engine, model="a")] == ["ses_c", "ses_a"]


# --- the SQL against a plain Python reading of DESIGN.md, on random sessions ---------------------------

COMMANDS = (ALLOWED, PIPE, HEAD_10, TIMEOUT, CURL, None)  # None: a malformed call


def reference(sessions: Sequence[Sequence[str | None]], min_attempts: int):
    """Loops (each a list of its commands) and (followed, recovered), walking each session in order."""
    loops: list[list[str | None]] = []
    followed = recovered = 0
    for calls in sessions:
        verdicts = [judge_call(STRICT.policy, "bash", None if c is None else {"command": c}) for c in calls]
        run: list[int] = []
        for i, v in enumerate([*verdicts, None]):  # None: the end of the session closes the last run
            breaks = v is None or v.allowed or (run and verdicts[run[-1]].shape != v.shape)
            if breaks:
                if len(run) >= min_attempts:
                    loops.append([calls[j] for j in run])
                run = []
            if v is not None and not v.allowed:
                run.append(i)
                if i + 1 < len(verdicts):
                    followed += 1
                    recovered += verdicts[i + 1].allowed
    return loops, followed, recovered


@pytest.fixture(scope="module", params=BACKENDS)
def shared_db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One migrated store for all examples of the property test (a fresh one each would dominate its time)."""
    with database_url(request.param, tmp_path_factory.mktemp("loops")) as url:

        async def setup() -> None:
            engine = create_engine(url)
            await migrate(engine)
            await engine.dispose()

        asyncio.run(setup())
        yield url


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sessions=st.lists(st.lists(st.sampled_from(COMMANDS), max_size=12), min_size=1, max_size=5),
    min_attempts=st.integers(2, 4),
    order=st.randoms(use_true_random=False),
)
def test_sql_matches_the_reference(shared_db: str, sessions, min_attempts, order):
    # Each run of an example is alone under its own model name (replays must not see earlier rows).
    model = f"model-{uuid.uuid4().hex}"
    store = Store()
    built = [store.session(model) for _ in sessions]
    requests = [s.request() for s in built]
    # Interleave the sessions' calls at random while keeping each session's own order.
    cursors = [0] * len(sessions)
    pending = [i for i, calls in enumerate(sessions) for _ in calls]
    order.shuffle(pending)
    for i in pending:
        command = sessions[i][cursors[i]]
        cursors[i] += 1
        if command is None:
            requests[i].call(raw='{"command": "uv ru')
        else:
            requests[i].call(command)

    async def compute():
        engine = create_engine(shared_db)
        try:
            await store.save(engine)
            return await model_stats(engine, model=model, loop_min_attempts=min_attempts)
        finally:
            await engine.dispose()

    stats = asyncio.run(compute())
    loops, followed, recovered = reference(sessions, min_attempts)
    if not any(sessions):
        assert stats["models"] == [] or stats["models"][0]["tool_calls"] == 0
        return
    (m,) = stats["models"]
    lengths = [len(lp) for lp in loops]
    assert m["loops"] == {
        "count": len(loops),
        "max_attempts": max(lengths, default=0),
        "mean_attempts": sum(lengths) / len(lengths) if lengths else None,
        # Malformed calls all carry the same raw text here, so a malformed run is an exact repeat too.
        "exact_repeats": sum(len(set(lp)) == 1 for lp in loops),
    }
    assert m["recovery_rate"] == (recovered / followed if followed else None)
    assert m["tool_calls"] == sum(len(c) for c in sessions)
