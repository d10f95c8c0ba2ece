"""Two conversations of one task, run side by side by an unchanged client that sends no session header
(Continue, an AI SDK agent): their requests are identical turn by turn, and each is still one session. Counted
from `/stats/models`: two sessions, each with its refused pipe and refused read, no loop, every error recovered.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from proxy.testing.scripted_upstream import ScriptedUpstream
from tests.conftest import RunningProxy
from tests.e2e.clients import CLIENTS, AgentWorld, find_ai_sdk, find_client, required
from tests.e2e.test_ai_sdk_agent import _run_agent
from tests.e2e.test_clients import PROMPT, _model_stats, _requests_text, scripted_model
from tests.e2e.test_clients import rooted_policy as rooted_policy  # a fixture, asked for by name

pytestmark = pytest.mark.e2e

RUNS = 2


def _continue(tmp_path: Path) -> tuple[AgentWorld, Callable[[str], Any]]:
    spec = CLIENTS["continue"]
    world = AgentWorld(tmp_path / "continue", spec, required(find_client(spec)))
    return world, lambda base_url: world.run(base_url, PROMPT)


def _ai_sdk(tmp_path: Path) -> tuple[AgentWorld, Callable[[str], Any]]:
    modules = required(find_ai_sdk())
    world = AgentWorld(tmp_path / "ai-sdk", CLIENTS["qwen-code"], Path("/nonexistent"))
    return world, lambda base_url: _run_agent(modules, world, base_url)


@pytest.mark.parametrize("client", ["continue", "ai-sdk"])
def test_identical_conversations_side_by_side_are_one_session_each(
        client: str, tmp_path: Path, upstream: ScriptedUpstream, start_proxy: Callable[..., RunningProxy],
        rooted_policy: Callable[[Path], Path]) -> None:
    world, run = {"continue": _continue, "ai-sdk": _ai_sdk}[client](tmp_path)
    upstream.responder = scripted_model(world.project, world.secret, world.notes)
    proxy = start_proxy(upstream.url, policy=rooted_policy(world.project))
    base_url = proxy.url + "/v1"
    if client == "continue":
        world.configure(base_url)  # once, before the runs share it
    with ThreadPoolExecutor(RUNS) as pool:
        results = list(pool.map(run, [base_url] * RUNS))
    context = f"{results}\n--- upstream requests\n{_requests_text(upstream)[-6000:]}"
    try:
        assert world.calls("head") == [] and world.calls("tail") == [], "a blocked pipe ran"
        assert world.calls("uv") == [["run", "scripts/search.py", "x"]] * RUNS
        stats = _model_stats(proxy)
        assert stats["sessions"] == RUNS, stats
        assert (stats["tool_calls"], stats["errors"]) == (4 * RUNS, 2 * RUNS), stats
        assert stats["primary_reasons"] == {"pipe": RUNS, "absolute_path": RUNS}, stats
        assert stats["loops"]["count"] == 0 and stats["recovery_rate"] == 1.0, stats
        sessions = proxy.rows("SELECT session_id, COUNT(*) FROM tool_calls GROUP BY session_id")
        assert sorted(count for _, count in sessions) == [4] * RUNS, sessions
    except AssertionError as error:
        raise AssertionError(f"{error}\n{context}") from None
