"""An agent built with the Vercel AI SDK as its docs show (`ToolLoopAgent` over `@ai-sdk/openai-compatible`,
streamed or whole, a `bash` and a `readFile` tool of its own: tests/e2e/drivers/ai-sdk_agent.mjs), unchanged,
through the real proxy on the shipped strict policy plus the project's root, in front of the scripted model of
test_clients.py. No profile names its tools: `bash {command}` is judged as a shell and `readFile {path}` as a
path by their schemas alone.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from proxy.policy.tools.profiles import HEURISTIC_PROFILE
from proxy.testing.scripted_upstream import ScriptedUpstream
from tests.conftest import RunningProxy
from tests.e2e.clients import CLIENTS, MODEL, AgentWorld, find_ai_sdk, required
from tests.e2e.responders import REFUSAL_LINE
from tests.e2e.test_clients import NARRATION, PROMPT, _assert_governed, _requests_text, scripted_model
from tests.e2e.test_clients import rooted_policy as rooted_policy  # a fixture, asked for by name

pytestmark = pytest.mark.e2e

DRIVER = Path(__file__).parent / "drivers" / "ai-sdk_agent.mjs"


def _run_agent(modules: Path, world: AgentWorld, base_url: str, mode: str = "stream") -> dict[str, Any]:
    env = {"PATH": f"{world.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(world.home)}
    done = subprocess.run(["node", str(DRIVER), str(modules), base_url, MODEL, str(world.project), PROMPT, mode],
                          cwd=world.project, env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, f"the AI SDK agent failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


@pytest.mark.parametrize("mode", ["stream", "generate"])
def test_ai_sdk_agent_is_governed(mode: str, tmp_path: Path, upstream: ScriptedUpstream,
                                  start_proxy: Callable[..., RunningProxy],
                                  rooted_policy: Callable[[Path], Path]) -> None:
    modules = required(find_ai_sdk())
    world = AgentWorld(tmp_path / "ai-sdk", CLIENTS["qwen-code"], Path("/nonexistent"))
    upstream.responder = scripted_model(world.project, world.secret, world.notes)
    proxy = start_proxy(upstream.url, policy=rooted_policy(world.project))
    result = _run_agent(modules, world, proxy.url + "/v1", mode)
    context = f"{json.dumps(result)}\n--- upstream requests\n{_requests_text(upstream)[-6000:]}"
    try:
        # What the SDK ran: the allowed command, then the read inside; the proxy's retries are not its steps.
        assert result["steps"] == [["bash"], ["readFile"], []], result
        # Each step's narration once (a refused first attempt's text is not sent again with the delivered one,
        # which repeats it), then the line that says what was refused.
        texts = result["texts"]
        assert [t.split("\n\n")[0] for t in texts] == [NARRATION, NARRATION, "Finished."], result
        assert [REFUSAL_LINE in t for t in texts] == [True, True, False], result
        assert "(pipe)." in texts[0] and "(absolute_path)." in texts[1], result
        if mode == "stream":
            assert result["text"] == "".join(texts), result
        assert all(bool(body.get("stream")) == (mode == "stream") for body in upstream.requests)
        _assert_governed(proxy, upstream, world.calls, reads=True, profile=HEURISTIC_PROFILE)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{context}") from None
