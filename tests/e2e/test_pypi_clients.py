"""Python agent frameworks, unchanged, through the real proxy on the shipped strict policy (plus the project's
root), each run by the python of its own venv (scripts/install-agent-pys.sh), in front of a scripted model.

smolagents' ToolCallingAgent demands a call at every step (`tool_choice: "required"`): a plain text answer would
read to it as a parse error until its step limit, so a turn whose budget is spent must reach its user as an
error that says why (docs/routes.md "A turn that must call a tool").
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from tests.conftest import RunningProxy
from tests.e2e.clients import CLIENTS, MODEL, NOTES_MARKER, SECRET_MARKER, AgentWorld
from tests.e2e.preloaded import DriverRun, start_driver
from tests.e2e.responders import is_refusal
from tests.e2e.test_clients import ALLOWED, PIPED, PROMPT, _model_stats
from tests.e2e.test_clients import rooted_policy as rooted_policy  # a fixture, asked for by name

pytestmark = pytest.mark.e2e

DRIVERS = Path(__file__).parent / "drivers"


def _venv_python(client: str) -> Path:
    cache = Path(os.environ.get("AGENT_PYS_CACHE", Path.home() / ".cache" / "allowlist-proxy-e2e-py"))
    python = cache / client / "bin" / "python"
    if not python.exists() or not (cache / client / ".installed").exists():  # the marker: its install finished
        detail = f"{client} is not installed in {python.parent.parent} (run scripts/install-agent-pys.sh)"
        if os.environ.get("E2E_REQUIRE_CLIENTS") == "1":
            pytest.fail(detail)
        pytest.skip(detail)
    return python


def _driver(client: str, world: AgentWorld, base_url: str, *args: str) -> subprocess.Popen[str] | DriverRun:
    """The client's driver started (with its own further arguments: a mode, a follow-up), by the python of the
    client's venv: a process of its own, forked from one that imported the driver's SDK already
    (tests/e2e/preloaded.py)."""
    python = _venv_python(client)
    env = {"PATH": f"{world.bin}{os.pathsep}/usr/bin:/bin", "HOME": str(world.home), "NO_COLOR": "1",
           "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    return start_driver(python, DRIVERS / f"{client}_agent.py", [base_url, MODEL, str(world.project), PROMPT, *args],
                        cwd=world.project, env=env)


def _result(client: str, driver: subprocess.Popen[str] | DriverRun) -> dict[str, Any]:
    """The driver's closing JSON line."""
    try:
        stdout, stderr = driver.communicate(timeout=120)
    finally:
        driver.kill()
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert driver.returncode == 0 and lines, f"{client} driver failed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _run(client: str, world: AgentWorld, base_url: str, *args: str) -> dict[str, Any]:
    return _result(client, _driver(client, world, base_url, *args))


def _steps(world: AgentWorld) -> Callable[[dict[str, Any]], Reply]:
    """The pipe (refused), then the allowed command; a read outside (refused), then inside; then the answer."""
    steps = [[("run_shell", {"command": PIPED}), ("run_shell", {"command": ALLOWED})],
             [("read_text", {"path": str(world.secret)}), ("read_text", {"path": str(world.notes)})],
             [("final_answer", {"answer": "done"})]]

    def respond(body: dict[str, Any]) -> Reply:
        done = refused = 0
        for message in body.get("messages") or []:
            if message.get("role") == "tool":  # the proxy's retry: a refusal
                refused += 1 if is_refusal(message) else 0
            elif message.get("role") == "user" and "Observation:" in json.dumps(message.get("content")):
                done, refused = done + 1, 0  # smolagents writes a tool's result as a user observation
        step = steps[min(done, len(steps) - 1)]
        return Reply(content="", tool_calls=[step[min(refused, len(step) - 1)]])

    return respond


def _world(tmp_path: Path, name: str) -> AgentWorld:
    return AgentWorld(tmp_path / name, CLIENTS["qwen-code"], Path("/nonexistent"))


def _governed_run(tmp_path: Path, upstream: ScriptedUpstream, start_proxy: Callable[..., RunningProxy],
                  request: pytest.FixtureRequest) -> tuple[AgentWorld, RunningProxy, dict[str, Any]]:
    world = _world(tmp_path, "smolagents")
    upstream.responder = _steps(world)
    policy = request.getfixturevalue("rooted_policy")(world.project)
    data = yaml.safe_load(policy.read_text())  # the agent's own read tool, named to the policy as README says
    data["profiles"] = {"my-smolagents": {"tools": {"read_text": {"paths": ["path"]}}}}
    policy.write_text(yaml.safe_dump(data, sort_keys=False))
    proxy = start_proxy(upstream.url, policy=policy)
    return world, proxy, _run("smolagents", world, proxy.url + "/v1")


def test_smolagents_is_governed(tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                request: pytest.FixtureRequest) -> None:
    world, proxy, result = _governed_run(tmp_path, upstream, start_proxy, request)
    sent = "\n".join(json.dumps(body) for body in upstream.requests)
    assert result == {"answer": "done"}, result
    assert world.calls("head") == [] and world.calls("tail") == [], "the blocked pipe ran"
    assert world.calls("uv") == [["run", "scripts/search.py", "x"]], "the allowed command ran other than once"
    assert SECRET_MARKER not in sent and NOTES_MARKER in sent
    assert all(body.get("tool_choice") == "required" for body in upstream.requests)
    stats = _model_stats(proxy)
    assert stats["reasons"].get("pipe") == 1 and stats["reasons"].get("absolute_path") == 1


def test_smolagents_user_learns_why_a_turn_was_blocked(tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                                       request: pytest.FixtureRequest) -> None:
    world = _world(tmp_path, "smolagents-blocked")
    upstream.responder = lambda body: Reply(content="", tool_calls=[("run_shell", {"command": PIPED})])
    proxy: RunningProxy = start_proxy(upstream.url, policy=request.getfixturevalue("rooted_policy")(world.project))
    result = _run("smolagents", world, proxy.url + "/v1")
    assert result.get("error") == "AgentGenerationError", result
    assert "allowlist-proxy blocked this turn" in result["message"] and PIPED in result["message"]
    assert len(upstream.requests) == 4, "one turn: the budget's attempts, then the error (no step-limit loop)"
    assert world.calls("head") == [] and world.calls("uv") == []


def test_smolagents_conversation_is_one_session(tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                                request: pytest.FixtureRequest) -> None:
    _, proxy, result = _governed_run(tmp_path, upstream, start_proxy, request)
    assert result == {"answer": "done"}, result
    assert _model_stats(proxy)["sessions"] == 1


def _mswea_steps(world: AgentWorld) -> Callable[[dict[str, Any]], Reply]:
    """mini-swe-agent acts on text: the pipe (refused, re-prompted as a user message), the allowed command, then
    its sentinel. It reads files only through its shell, which the strict policy keeps to the scripts."""
    steps = [[PIPED, ALLOWED], ["echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]]

    def respond(body: dict[str, Any]) -> Reply:
        done = refused = 0
        for message in body.get("messages") or []:
            text = json.dumps(message.get("content"))
            if message.get("role") == "user" and "<returncode>" in text:
                done, refused = done + 1, 0  # mini-swe-agent's observation: the action ran
            elif message.get("role") == "user" and "Rejected" in text:
                refused += 1  # the proxy's re-prompt
        step = steps[min(done, len(steps) - 1)]
        command = step[min(refused, len(step) - 1)]
        return Reply(content=f"THOUGHT: next.\n\n```mswea_bash_command\n{command}\n```\n")

    return respond


def test_mini_swe_agent_text_actions_are_governed(tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                                  request: pytest.FixtureRequest) -> None:
    world = _world(tmp_path, "mini-swe-agent")
    upstream.responder = _mswea_steps(world)
    proxy: RunningProxy = start_proxy(upstream.url, policy=request.getfixturevalue("rooted_policy")(world.project))
    result = _run("mini-swe-agent", world, proxy.url + "/v1")
    sent = "\n".join(json.dumps(body) for body in upstream.requests)
    assert result == {"answer": "Submitted"}, f"{result}\n{sent[-4000:]}"
    assert world.calls("head") == [] and world.calls("tail") == [], "the blocked pipe ran"
    assert world.calls("uv") == [["run", "scripts/search.py", "x"]], "the allowed command ran other than once"
    stats = _model_stats(proxy)
    assert stats["reasons"] == {"pipe": 1}
    assert stats["sessions"] == 1, "one run, one session"
    sources = {r[0] for r in proxy.rows("SELECT source FROM tool_calls")}
    assert sources == {"text:mswea_bash_command"}


def test_mini_swe_agent_tool_config_submits(tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                            request: pytest.FixtureRequest) -> None:
    """mini-swe-agent's default config (mini.yaml: a `bash` tool) on the shipped policy: the pipe is refused, the
    allowed command runs once, and its end-of-run sentinel, allowed for mini-swe-agent alone, ends the run as
    `Submitted` (not RepeatedFormatError); one session."""
    world = _world(tmp_path, "mini-swe-agent-tools")
    steps = [[PIPED, ALLOWED], ["echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]]

    def respond(body: dict[str, Any]) -> Reply:
        done = refused = 0
        for message in body.get("messages") or []:
            if message.get("role") == "tool":
                done, refused = (done, refused + 1) if is_refusal(message) else (done + 1, 0)
        step = steps[min(done, len(steps) - 1)]
        return Reply(content="THOUGHT: next.", tool_calls=[("bash", {"command": step[min(refused, len(step) - 1)]})])

    upstream.responder = respond
    proxy: RunningProxy = start_proxy(upstream.url, policy=request.getfixturevalue("rooted_policy")(world.project))
    result = _run("mini-swe-agent", world, proxy.url + "/v1", "tools")
    assert result == {"answer": "Submitted"}, f"{result}\n{json.dumps(upstream.requests)[-3000:]}"
    assert world.calls("head") == [] and world.calls("uv") == [["run", "scripts/search.py", "x"]]
    stats = _model_stats(proxy)
    assert (stats["sessions"], stats["reasons"]) == (1, {"pipe": 1}), stats
