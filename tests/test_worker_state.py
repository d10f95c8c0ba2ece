"""The pieces that make `serve --workers N` one proxy: the parent's policy state followed by every worker, requests
in flight counted over all workers, one figures' process asked by all, writers taking turns on one SQLite file,
and the state a next request needs (Responses chains, stated roots) in the store."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.errors import BadRequest
from proxy.policy.file.manager import PolicyManager
from proxy.policy.file.shared import FollowerPolicies, publish_state
from proxy.record import SessionRef
from proxy.sessions.resolve import SessionResolver
from proxy.sessions.response_chains import Continuation, ResponseChains
from proxy.stats.figures_relay import FiguresClient, FiguresRelay
from proxy.store.db import create_engine, migrate
from proxy.store.lane import WriterLane
from proxy.store.writer import StoreWriter
from proxy.throughput.in_flight import InFlightBoard
from tests.conftest import STRICT_POLICY

# -- the policy: one decision, followed --------------------------------------------------------------------


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "strict.yaml").write_text(STRICT_POLICY.read_text())
    return directory


def test_a_follower_serves_what_the_parent_published_never_the_file(policy_dir: Path, tmp_path: Path) -> None:
    path = policy_dir / "strict.yaml"
    parent = PolicyManager(path)
    state = tmp_path / "state.json"
    assert publish_state(parent, state)
    assert not publish_state(parent, state)  # nothing changed: nothing written
    follower = FollowerPolicies(path, state, leader=0)
    assert follower.current().hash == parent.current().hash
    assert follower.current().path == path
    # A widening edit: the parent holds it, the follower reports it held and serves the same.
    path.write_text(STRICT_POLICY.read_text().replace("mode: enforce", "mode: observe", 1))
    assert parent.reload() is False
    assert publish_state(parent, state)
    assert follower.reload()
    assert follower.current().hash == parent.current().hash and follower.current().mode == "enforce"
    assert [h["file"] for h in follower.status()["held"]] == [str(path)]
    # The file is not read by the follower, whatever it holds now.
    path.write_text("not: [a policy")
    assert follower.reload() and follower.current().mode == "enforce"
    # The parent applies the held edit (SIGHUP): the follower serves it once told.
    path.write_text(STRICT_POLICY.read_text().replace("mode: enforce", "mode: observe", 1))
    parent.apply_held()
    publish_state(parent, state)
    assert follower.reload()
    assert follower.current().mode == "observe" and follower.status()["held"] == []
    assert follower.status()["active"] == parent.status()["active"]


def test_a_follower_says_the_parents_held_edits_in_its_metrics_and_health(policy_dir: Path, tmp_path: Path) -> None:
    """What /health, /metrics, the webhook and `policy status` of a worker say of a held edit is the parent's: the
    file, and SIGHUP to the parent (the one that decides) to apply it."""
    from proxy import telemetry

    path = policy_dir / "strict.yaml"
    parent = PolicyManager(path)
    state = tmp_path / "state.json"
    publish_state(parent, state)
    seen: list[tuple[str, bool]] = []

    def listen(event: object) -> None:
        if isinstance(event, telemetry.PolicyFileHeld):
            seen.append((event.file, event.held))

    telemetry.subscribe(listen)
    try:
        follower = FollowerPolicies(path, state, leader=12345)
        path.write_text(STRICT_POLICY.read_text().replace("mode: enforce", "mode: observe", 1))
        parent.reload()
        publish_state(parent, state)
        follower.reload()
        (held,) = follower.held()
        assert held["file"] == str(path) and held["apply"] == f"kill -HUP {os.getpid()}"
        assert seen[-1] == (str(path), True)
        path.write_text(STRICT_POLICY.read_text())  # reverted: nothing held any more
        parent.reload()
        publish_state(parent, state)
        follower.reload()
        assert follower.held() == [] and seen[-1] == (str(path), False)
    finally:
        telemetry.unsubscribe(listen)


def test_a_follower_keeps_its_policy_when_the_state_cannot_be_read(policy_dir: Path, tmp_path: Path) -> None:
    path = policy_dir / "strict.yaml"
    parent = PolicyManager(path)
    state = tmp_path / "state.json"
    publish_state(parent, state)
    follower = FollowerPolicies(path, state, leader=0)
    served = follower.current()
    state.write_text("{not json")
    assert follower.reload() is False
    assert follower.current() is served


def test_the_parents_reload_listeners_run_after_every_reload(policy_dir: Path) -> None:
    parent = PolicyManager(policy_dir / "strict.yaml")
    seen: list[str] = []
    parent.reloaded.append(lambda: seen.append(parent.current().hash))
    parent.reload()
    parent.apply_held()
    assert seen == [parent.current().hash] * 2


# -- requests in flight over all workers ---------------------------------------------------------------------


def test_in_flight_counts_every_workers_requests_and_forgets_a_gone_worker() -> None:
    cells = InFlightBoard.cells(multiprocessing.get_context("spawn"), 3)
    first, second = InFlightBoard(cells, 3, 0), InFlightBoard(cells, 3, 1)
    assert first.add("qwen", 1) == 1
    assert second.add("qwen", 1) == 2
    assert second.add("other-model", 1) == 1
    assert first.add("qwen", 1) == 3
    InFlightBoard.clear(cells, 0)  # worker 0 died with two requests in flight
    assert second.add("qwen", -1) == 0


# -- one figures' process ------------------------------------------------------------------------------------


async def _count_requests(engine: AsyncEngine, *, plus: int) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM requests"))).scalar() or 0) + plus


async def _refuse(engine: AsyncEngine, *, since: str) -> int:
    raise BadRequest(f"bad since: {since}", param="since")


@pytest.fixture
async def store(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = create_engine(url)
    await migrate(engine)
    yield url, engine
    await engine.dispose()


async def test_workers_ask_the_parents_figures_and_get_its_answers_and_errors(store, tmp_path: Path) -> None:
    url, engine = store
    relay = FiguresRelay(str(tmp_path / "figures.sock"), url, engine)
    await relay.start()
    try:
        client = FiguresClient(relay.path)
        assert await client.compute(_count_requests, engine, plus=2) == 2
        with pytest.raises(BadRequest) as refused:
            await client.compute(_refuse, engine, since="yesterday")
        assert refused.value.param == "since" and refused.value.message == "bad since: yesterday"
    finally:
        figures_pid = relay._figures.pid
        await relay.close()
        if figures_pid is not None:  # this test's own figures' process: not left behind the test run
            with contextlib.suppress(ProcessLookupError):
                os.kill(figures_pid, signal.SIGTERM)
    # The parent gone: the worker computes the figure itself.
    assert await FiguresClient(relay.path).compute(_count_requests, engine, plus=5) == 5


# -- writers of one SQLite file take turns -----------------------------------------------------------------


async def test_a_writer_whose_turn_another_holds_waits_in_its_thread_not_on_the_loop(store) -> None:
    _url, engine = store
    first, second = WriterLane(engine), WriterLane(engine)
    try:
        assert first._turn is not None and second._turn is not None
        first._turn.acquire()  # another process's writer holds the turn (flock: per open file)
        assert second.try_here(lambda conn: 1) == (False, None)  # the loop never waits for it
        released = threading.Timer(0.3, first._turn.release)
        released.start()
        started = time.monotonic()
        assert await second.run(lambda conn: 7) == 7  # waited in the lane's thread, woken when it was let go
        assert time.monotonic() - started >= 0.25
        assert second.try_here(lambda conn: 8) == (True, 8)
    finally:
        await first.close()
        await second.close()


# -- what the next request needs, in the store -----------------------------------------------------------------


async def test_a_responses_chain_written_by_one_process_is_found_by_another(store) -> None:
    _url, engine = store
    writer = StoreWriter(engine)
    await writer.start()
    try:
        mine = ResponseChains(engine=engine, writer=writer)
        assert mine.remember("resp_client", "resp_server", [{"type": "message", "role": "assistant",
                                                            "content": "explained"}])
        assert not mine.remember("resp_same", "resp_same", [])  # continues from itself: nothing to keep
        await writer.commit(10)
        other = ResponseChains(engine=engine, writer=writer)
        found = await other.find("resp_client")
        assert found == Continuation("resp_server", ({"type": "message", "role": "assistant", "content": "explained"},))
        assert await other.find("resp_never") is None
        assert await other.find(["not", "an", "id"]) is None
    finally:
        await writer.stop()


async def test_a_sessions_stated_root_is_found_by_another_process(store) -> None:
    _url, engine = store
    writer = StoreWriter(engine)
    await writer.start()
    try:
        one = SessionResolver(engine=engine, writer=writer, shared=True)
        other = SessionResolver(engine=engine, writer=writer, shared=True)
        session = SessionRef("ses_roots", "header", False)
        assert one.project_root(session, "/srv/app/project") == "/srv/app/project"
        await writer.commit(10)
        assert other.project_root(session, None) is None  # not looked up yet
        await other.load_root(session, None)
        assert other.project_root(session, None) == "/srv/app/project"
        one.project_root(session, "/srv/app/other")  # the client states another root: the latest wins
        await writer.commit(10)
        third = SessionResolver(engine=engine, writer=writer, shared=True)
        await third.load_root(session, None)
        assert third.project_root(session, None) == "/srv/app/other"
    finally:
        await writer.stop()


async def test_remember_says_when_the_answer_must_wait_for_its_lineage(store) -> None:
    _url, engine = store
    writer = StoreWriter(engine)
    await writer.start()
    try:
        messages = [{"role": "user", "content": "hi"}]
        for shared in (False, True):
            resolver = SessionResolver(engine=engine, writer=writer, shared=shared)
            ref = await resolver.aresolve({}, messages)
            assert resolver.remember(ref, messages, {"role": "assistant", "content": "hello"}) is shared
        named = SessionRef("ses_x", "header", False)
        assert resolver.remember(named, messages, {"role": "assistant", "content": "hello"}) is False
    finally:
        await writer.stop()


async def test_a_keys_sessions_and_an_id_free_lineage_continue_in_another_process(store) -> None:
    """A keyed conversation (its namespace) delivered by one process continues in another, by its call's id and,
    where the client rewrote the id (Agno), by its id-free lineage; never in another key's namespace."""
    import json

    _url, engine = store
    writer = StoreWriter(engine)
    await writer.start()
    try:
        one = SessionResolver(engine=engine, writer=writer, shared=True)
        conversation = [{"role": "system", "content": "You are a coder."}, {"role": "user", "content": "fix it"}]
        reply = {"role": "assistant", "content": "", "tool_calls": [
            {"id": "chatcmpl-tool-0123456789abcdef0123456789abcdef", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": "uv run scripts/test.py"})}}]}
        first = await one.aresolve({}, conversation, namespace="key_a")
        assert one.remember(first, None, reply)  # another process may answer next: committed before the end
        await writer.commit(10)
        follow = [*conversation, reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"],
                                         "content": "ok"}]
        rewritten = json.loads(json.dumps(follow).replace("chatcmpl-tool-", "call_0000000000000"))
        for sent in (follow, rewritten):
            other = SessionResolver(engine=engine, writer=writer, shared=True)  # a process that saw nothing
            assert (await other.aresolve({}, sent, namespace="key_a")).id == first.id
            assert (await other.aresolve({}, sent, namespace="key_b")).is_new
            assert (await other.aresolve({}, sent)).is_new
    finally:
        await writer.stop()
