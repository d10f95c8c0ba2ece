"""Agent SDKs, unchanged, through the real proxy on the shipped strict policy, in front of a scripted model: the
OpenAI Agents SDK, pydantic-ai, LangGraph with LangChain's shell tool, Strands Agents with strands-agents-tools,
Agno with its ShellTools and FileTools, and AutoGen AgentChat, each run by the python of its own venv
(scripts/install-agent-pys.sh) through a driver in tests/e2e/drivers/ that builds the agent as the SDK's docs show.

Each conversation is two runs of the agent (the task, then the user's follow-up); several run side by side on one
proxy, so their turns interleave there. Asserted from what really happened: the stubs' logs (what a shell ran),
the upstream's requests (what reached the model) and the proxy's `/stats/models`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from tests.conftest import ROOT, RunningProxy
from tests.e2e.clients import NOTES_MARKER, SECRET_MARKER, AgentWorld
from tests.e2e.responders import REFUSAL_LINE, is_refusal, refusals_in_turn
from tests.e2e.test_clients import ALLOWED, PIPED, _model_stats, _requests_text
from tests.e2e.test_clients import rooted_policy as rooted_policy  # a fixture, asked for by name
from tests.e2e.test_pypi_clients import _driver, _result, _run, _venv_python, _world

pytestmark = pytest.mark.e2e

# ---------------------------------------------------------------- tool-calling SDK agents: two runs side by side


Call = tuple[str, dict[str, Any]]
FOLLOW_UP = "Thanks. Anything else to note?"


@dataclass(frozen=True)
class SdkAgent:
    """An agent framework's run as its docs show it: its own shell and read tools, each call in that tool's shape."""

    client: str  # the venv and the driver
    modes: tuple[str, ...]  # one conversation per mode, side by side on one proxy
    shell: Callable[[str, Path], Call]  # (command, project)
    read: Callable[[Path], Call]
    # The reasons the proxy may give for the pipe (an argv tool's `bash -c` is a pipe, or a wrapper where only a
    # client's own argv form is unwrapped).
    refused: frozenset[str] = frozenset({"pipe"})


SDK_AGENTS = {
    "openai-agents": SdkAgent("openai-agents", ("chat", "chat-stream", "responses-stream"),
                              lambda command, _: ("run_shell", {"command": command}),
                              lambda path: ("read_file", {"path": str(path)})),
    # optional arguments declared as anyOf [string, null]: the pipe's `cwd` sent as null, the allowed command's as
    # the project's absolute path
    "pydantic-ai": SdkAgent("pydantic-ai", ("run", "stream", "responses"),
                            lambda command, project: ("run_command", {
                                "command": command, "cwd": str(project) if command == ALLOWED else None}),
                            lambda path: ("read_file", {"path": str(path), "encoding": None})),
    # ShellTool's `commands` is a string or a list: one run sends each
    "langgraph": SdkAgent("langgraph", ("invoke", "stream"),
                          lambda command, _: ("terminal", {"commands": [command]}),
                          lambda path: ("read_file", {"file_path": str(path)})),
    # strands-agents-tools' shell and file reader (its editor views a file too); Strands streams every request
    "strands": SdkAgent("strands", ("stream",), lambda command, _: ("shell", {"command": command}),
                        lambda path: ("file_read", {"path": str(path), "mode": "view"})),
    # Agno's ShellTools runs an argv without a shell: the pipe needs one (`bash -c`), the allowed command is its words
    "agno": SdkAgent("agno", ("run", "stream"),
                     lambda command, _: ("run_shell_command", {
                         "args": ["bash", "-c", command] if "|" in command else command.split()}),
                     lambda path: ("read_file", {"file_name": str(path)}), frozenset({"pipe", "wrapper"})),
    "autogen": SdkAgent("autogen", ("run", "stream"), lambda command, _: ("run_shell", {"command": command}),
                        lambda path: ("read_text", {"path": str(path)})),
}


def _sdk_steps(agent: SdkAgent, world: AgentWorld, *, relative: bool = False) -> Callable[[dict[str, Any]], Reply]:
    """The pipe (refused), then the allowed command; a read outside the project (refused), then the notes inside
    it (by absolute paths, or `relative` to the project the agent runs in); each turn with reasoning and a
    narration as Qwen3 on vLLM gives them; then the answer; the user's follow-up is answered at once. A tool
    message that is the proxy's refusal moves a step to its next call, any other means the call ran."""
    project, notes = (Path("."), Path(world.notes.name)) if relative else (world.project, world.notes)
    steps = [[agent.shell(PIPED, project), agent.shell(ALLOWED, project)],
             [agent.read(world.secret), agent.read(notes)]]
    if agent.client == "langgraph":  # the second conversation sends `commands` as one string
        steps_str = [[("terminal", {"commands": PIPED}), ("terminal", {"commands": ALLOWED})], steps[1]]

    def respond(body: dict[str, Any]) -> Reply:
        messages = body.get("messages") or []
        if any(m.get("role") == "user" and FOLLOW_UP in json.dumps(m.get("content")) for m in messages):
            return Reply(content="nothing else")
        done = refused = 0
        for message in messages:
            if message.get("role") == "tool":
                done, refused = (done, refused + 1) if is_refusal(message) else (done + 1, 0)
        script = steps
        if agent.client == "langgraph" and body.get("stream"):
            script = steps_str
        if done >= len(script):
            return Reply(content="done")
        step = script[done]
        return Reply(content="On it.", reasoning="The next step.", tool_calls=[step[min(refused, len(step) - 1)]])

    return respond


def _run_side_by_side(client: str, world: AgentWorld, upstream: ScriptedUpstream, proxy: RunningProxy,
                      modes: tuple[str, ...]) -> None:
    """One conversation per mode, all at once (their turns interleave at the proxy), each two runs of the agent:
    the task, then the user's follow-up in the same conversation."""
    drivers = [_driver(client, world, proxy.url + "/v1", mode, FOLLOW_UP) for mode in modes]
    results = [_result(client, driver) for driver in drivers]
    expected = {"answer": "done", "follow_up": "nothing else"}
    assert results == [expected] * len(modes), f"{results}\n{_requests_text(upstream)[-4000:]}"


def _assert_governed_and_counted(world: AgentWorld, upstream: ScriptedUpstream, proxy: RunningProxy,
                                 conversations: int, refused: frozenset[str] = frozenset({"pipe"})) -> None:
    """In each conversation the pipe never ran, the allowed command ran once, the read outside the project was
    refused and the one inside passed; `/stats/models` counts each conversation as one session, with its two errors
    and their reasons."""
    sent = _requests_text(upstream)
    assert world.calls("head") == [] and world.calls("tail") == [], "the blocked pipe ran"
    ran = world.calls("uv")
    assert ran == [["run", "scripts/search.py", "x"]] * conversations, "the allowed command ran other than once"
    assert SECRET_MARKER not in sent and NOTES_MARKER in sent
    stats = _model_stats(proxy)
    assert (stats["sessions"], stats["errors"]) == (conversations, 2 * conversations), stats
    reasons = dict(stats["reasons"])
    assert reasons.pop("absolute_path", 0) == conversations, stats["reasons"]
    assert sum(reasons.values()) == conversations and set(reasons) <= refused, stats["reasons"]


@pytest.mark.parametrize("client", sorted(SDK_AGENTS))
def test_sdk_agent_is_governed_and_counted(client: str, tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                           request: pytest.FixtureRequest) -> None:
    """One conversation per mode (the SDK's model classes, whole and streamed) of the unchanged agent, side by side,
    on the shipped policy (its project as the root)."""
    agent = SDK_AGENTS[client]
    _venv_python(client)
    world = _world(tmp_path, client)
    upstream.responder = _sdk_steps(agent, world)
    proxy: RunningProxy = start_proxy(upstream.url, policy=request.getfixturevalue("rooted_policy")(world.project))
    _run_side_by_side(client, world, upstream, proxy, agent.modes)
    _assert_governed_and_counted(world, upstream, proxy, len(agent.modes), agent.refused)


def _refused_calls_stay_refused(responder: Callable[[dict[str, Any]], Reply], refused: tuple[str, ...],
                                broken: list[str]) -> Callable[[dict[str, Any]], Reply]:
    """`responder`, noting each conversation in which a call the proxy refused reads as answered by a result (what
    the model reads when a chained response id leads to an attempt the client never got). Results are paired
    with the calls before them by position: vLLM gives a streamed response's stored items fresh call ids."""

    def respond(body: dict[str, Any]) -> Reply:
        pending: list[str] = []
        for message in body.get("messages") or []:
            if message.get("role") == "assistant":
                pending = [json.dumps(call.get("function")) for call in message.get("tool_calls") or []]
            elif message.get("role") == "tool" and pending:
                call = pending.pop(0)
                if not is_refusal(message) and any(json.dumps(r)[1:-1] in call for r in refused):
                    broken.append(f"{call} answered by {message.get('content')!r}")
        return responder(body)

    return respond


@pytest.mark.parametrize("client", ["openai-agents", "pydantic-ai"])
def test_sdk_agent_responses_chained_by_previous_response_id(client: str, tmp_path: Path, upstream: ScriptedUpstream,
                                                             start_proxy, request: pytest.FixtureRequest) -> None:
    """The Agents SDK (`auto_previous_response_id`) and pydantic-ai (`openai_previous_response_id='auto'`) continuing
    each turn by `previous_response_id` against a server that stores responses: a refused call's retry happens
    inside the proxy, so the id the client continues from must lead the server to the turn the client got, never
    to the refused attempt; two conversations side by side, two sessions."""
    agent = SDK_AGENTS[client]
    _venv_python(agent.client)
    world = _world(tmp_path, f"{client}-chained")
    broken: list[str] = []
    upstream.store_responses = True
    upstream.responder = _refused_calls_stay_refused(_sdk_steps(agent, world), (PIPED, str(world.secret)), broken)
    proxy: RunningProxy = start_proxy(upstream.url, policy=request.getfixturevalue("rooted_policy")(world.project))
    modes = ("responses-chained", "responses-chained-stream")
    _run_side_by_side(agent.client, world, upstream, proxy, modes)
    chained = [body for body in upstream.requests if body.get("previous_response_id")]
    assert len(chained) >= 2 * len(modes), [(b.get("previous_response_id"), b.get("input")) for b in upstream.requests]
    assert broken == [], f"the server continued from an attempt the client never got: {broken}"
    _assert_governed_and_counted(world, upstream, proxy, len(modes))


# (client, mode, what the SDK raises to its user)
DEMANDING_RUNS = [("pydantic-ai", "structured", "ModelRequestRejectedError"),  # a 422: not to be sent again unchanged
                  ("openai-agents", "chat-required", "UnprocessableEntityError"),
                  ("openai-agents", "responses-required-stream", "ModelBehaviorError")]  # the `error` event's


@pytest.mark.parametrize(("client", "mode", "raised"), DEMANDING_RUNS)
def test_sdk_user_learns_why_a_demanded_call_was_blocked(client: str, mode: str, raised: str, tmp_path: Path,
                                                         upstream: ScriptedUpstream, start_proxy,
                                                         request: pytest.FixtureRequest) -> None:
    """An agent that demands a tool call in its request (`tool_choice: "required"`: pydantic-ai's structured answer,
    the Agents SDK's `ModelSettings`): a blocked turn ends in the error carrying the explanation, which the SDK
    raises to its user; one turn, the budget's four attempts, nothing ran."""
    agent = SDK_AGENTS[client]
    world = _world(tmp_path, f"{client}-{mode}")
    upstream.responder = lambda body: Reply(content="", tool_calls=[agent.shell(PIPED, world.project)])
    proxy: RunningProxy = start_proxy(upstream.url, policy=request.getfixturevalue("rooted_policy")(world.project))
    result = _run(client, world, proxy.url + "/v1", mode, FOLLOW_UP)
    assert result.get("error") == raised, result
    assert "allowlist-proxy blocked this turn" in result["message"] and PIPED in result["message"], result
    assert [body.get("tool_choice") for body in upstream.requests] == ["required"] * 4
    assert world.calls("head") == [] and world.calls("uv") == []


BLOCKED_RUNS = [("openai-agents", "responses-stream"), ("openai-agents", "responses-chained-stream"),
                ("pydantic-ai", "responses"), ("pydantic-ai", "responses-chained"), ("langgraph", "stream"),
                ("strands", "stream"), ("agno", "run"), ("autogen", "stream")]


@pytest.mark.parametrize(("client", "mode"), BLOCKED_RUNS)
def test_sdk_agent_user_learns_why_a_turn_was_blocked(client: str, mode: str, tmp_path: Path,
                                                      upstream: ScriptedUpstream, start_proxy,
                                                      request: pytest.FixtureRequest) -> None:
    """A model that keeps proposing the pipe: the turn ends, once the budget is spent, in the explanation the agent
    hands its user as its answer; nothing ran. The user's follow-up (by the whole history, or chained by the
    response id against a server that stores responses) reaches the model after that explanation, every call it
    made answered; the conversation is one session with the budget's four refusals."""
    agent = SDK_AGENTS[client]
    world = _world(tmp_path, f"{client}-blocked")
    read: list[list[dict[str, Any]]] = []

    def respond(body: dict[str, Any]) -> Reply:
        read.append(body["messages"])
        if FOLLOW_UP in json.dumps(body["messages"]):
            return Reply(content="nothing else")
        return Reply(content="", tool_calls=[agent.shell(PIPED, world.project)])

    upstream.store_responses = True
    upstream.responder = respond
    proxy: RunningProxy = start_proxy(upstream.url, policy=request.getfixturevalue("rooted_policy")(world.project))
    result = _run(client, world, proxy.url + "/v1", mode, FOLLOW_UP)
    explanation = result.get("answer", "")
    assert "allowlist-proxy blocked this turn" in explanation, result
    assert PIPED in explanation and "(pipe)" in explanation and result["follow_up"] == "nothing else"
    assert world.calls("head") == [] and world.calls("uv") == []
    assert bool(upstream.requests[-1].get("previous_response_id")) == ("chained" in mode)
    follow_up = read[-1]
    assert FOLLOW_UP in json.dumps(follow_up[-1]) and follow_up[-2]["role"] == "assistant", follow_up[-3:]
    assert "allowlist-proxy blocked this turn" in json.dumps(follow_up[-2]["content"]), follow_up[-3:]
    for position, message in enumerate(follow_up):
        for n, _ in enumerate(message.get("tool_calls") or []):
            assert follow_up[position + 1 + n]["role"] == "tool", f"a call left unanswered: {follow_up[position:]}"
    stats = _model_stats(proxy)
    assert (stats["sessions"], stats["errors"], stats["reasons"]) == (1, 4, {"pipe": 4}), stats


@pytest.mark.parametrize("client", sorted(SDK_AGENTS))
def test_sdk_agent_on_the_bare_shipped_policy(client: str, tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                              ) -> None:
    """policies/strict.yaml as shipped, no root pinned: an SDK agent states no working directory, so the project is
    what its relative paths name (the agent runs in it): the pipe is refused, the allowed command runs (pydantic-ai's
    `cwd` "."), the read of the notes by a relative path passes, the absolute read outside is refused, and the
    conversation is one session."""
    agent = SDK_AGENTS[client]
    world = _world(tmp_path, f"{client}-bare")
    upstream.responder = _sdk_steps(agent, world, relative=True)
    proxy: RunningProxy = start_proxy(upstream.url, policy=ROOT / "policies" / "strict.yaml")
    _run_side_by_side(client, world, upstream, proxy, agent.modes[:1])
    _assert_governed_and_counted(world, upstream, proxy, 1, agent.refused)


# (client, mode): the SDKs' streamed model classes, and one whole one each for comparison
ANSWER_RUNS = [("openai-agents", "chat-stream"), ("openai-agents", "responses-stream"), ("openai-agents", "chat"),
               ("pydantic-ai", "stream"), ("pydantic-ai", "run"), ("langgraph", "stream")]
NARRATION = "I will search the notes."
ANSWER = "The notes mention x twice."


@pytest.mark.parametrize(("client", "mode"), ANSWER_RUNS)
def test_sdk_agent_user_sees_the_answer_after_a_refusal(client: str, mode: str, tmp_path: Path,
                                                        upstream: ScriptedUpstream, start_proxy,
                                                        request: pytest.FixtureRequest) -> None:
    """The model narrates, proposes the pipe (refused), then answers in text on the retry: the agent's answer (what
    it hands its user) holds the model's answer and the line that says what was refused, the narration at most
    once; the user's follow-up continues the conversation, one session; nothing ran."""
    agent = SDK_AGENTS[client]
    world = _world(tmp_path, f"{client}-answer")

    def respond(body: dict[str, Any]) -> Reply:
        if FOLLOW_UP in json.dumps(body["messages"]):
            return Reply(content="nothing else")
        if refusals_in_turn(body):
            return Reply(content=ANSWER)
        return Reply(content=NARRATION, tool_calls=[agent.shell(PIPED, world.project)])

    upstream.responder = respond
    proxy: RunningProxy = start_proxy(upstream.url, policy=request.getfixturevalue("rooted_policy")(world.project))
    result = _run(client, world, proxy.url + "/v1", mode, FOLLOW_UP)
    answer = str(result.get("answer", ""))
    assert ANSWER in answer and REFUSAL_LINE in answer and answer.count(NARRATION) <= 1, result
    assert result["follow_up"] == "nothing else", result
    assert world.calls("head") == [] and world.calls("uv") == []
    stats = _model_stats(proxy)
    assert (stats["sessions"], stats["errors"], stats["reasons"]) == (1, 1, {"pipe": 1}), stats

