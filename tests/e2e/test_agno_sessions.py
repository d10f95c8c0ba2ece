"""Agno 3.1 rewrites the call ids it was given (`call_` and a counter) before every request: its conversation is
still one session, followed by what it sends back (its turns' text, tool names and arguments), and a second run
of the same task is a session of its own."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from tests.e2e.clients import CLIENTS, AgentWorld
from tests.e2e.responders import REFUSAL_LINE, is_refusal
from tests.e2e.test_clients import ALLOWED, PIPED, _model_stats
from tests.e2e.test_clients import rooted_policy as rooted_policy  # a fixture, asked for by name
from tests.e2e.test_pypi_clients import DRIVERS, MODEL, PROMPT, _result, _venv_python

pytestmark = pytest.mark.e2e


def _run(world: AgentWorld, base_url: str) -> dict[str, Any]:
    python = _venv_python("agno")
    env = {"PATH": f"{world.bin}{os.pathsep}/usr/bin:/bin", "HOME": str(world.home), "NO_COLOR": "1",
           "AGNO_TELEMETRY": "false"}
    argv = [str(python), str(DRIVERS / "agno_sessions_agent.py"), base_url, MODEL, str(world.project), PROMPT]
    return _result("agno", subprocess.Popen(argv, cwd=world.project, env=env, text=True, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE))


def _steps(body: dict[str, Any]) -> Reply:
    """The pipe (refused), the allowed command, the command once more, then the answer."""
    done = refused = 0
    for message in body.get("messages") or []:
        if message.get("role") == "tool":
            if is_refusal(message):
                refused += 1
            else:
                done, refused = done + 1, 0
    if done >= 2:
        return Reply(content="done")
    command = PIPED if done == 0 and refused == 0 else ALLOWED
    return Reply(content="", tool_calls=[("run_shell", {"command": command})])


def test_agno_rewrites_call_ids_and_stays_one_session(tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                                      rooted_policy) -> None:
    upstream.responder = _steps
    proxy = None
    for run in range(2):
        world = AgentWorld(tmp_path / f"agno{run}", CLIENTS["qwen-code"], Path("/nonexistent"))
        proxy = proxy or start_proxy(upstream.url, policy=rooted_policy(world.project))
        result = _run(world, proxy.url + "/v1")
        # The refusal's note comes with the turn's text (Agno joins every reply's content into its answer).
        answer = result["answer"]
        assert answer.endswith("done") and answer.count(REFUSAL_LINE) == 1, result
        assert world.calls("uv") == [["run", "scripts/search.py", "x"]] * 2
    assert proxy is not None
    # What the client sent back (the proxy's own retries aside): every delivered id rewritten.
    sent = {call["id"] for body in upstream.requests for m in body["messages"] for call in m.get("tool_calls") or []
            if not any(is_refusal(t) for t in body["messages"] if t.get("tool_call_id") == call["id"])}
    assert sent == {"call_00000000000000000000000000000000000", "call_00000000000000000000000000000000001"}, sent
    stats = _model_stats(proxy)
    assert stats["sessions"] == 2, json.dumps(stats)
    assert stats["reasons"].get("pipe") == 2
