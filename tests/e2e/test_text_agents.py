"""Agents that act on text, unchanged, through the real proxy on the shipped strict policy (plus the project's root), in
front of a scripted model: DSPy's ReAct (ChatAdapter fields, whole and streamed, and JSONAdapter), Open Interpreter
(markdown code blocks, its text mode for a vLLM model name; and its `execute` tool) and aider (SEARCH/REPLACE edits
and ```bash suggestions, whole files, unified diffs), each run by the python of its own venv
(scripts/install-agent-pys.sh) through a driver in tests/e2e/drivers/.

The model first proposes the pipe (refused: the proxy asks again), then the allowed command; then a read outside the
project or a write of a protected file (refused), then one the policy allows; then it answers. Asserted from what
really happened: the stubs' logs (what a shell ran), the files, the upstream's requests (what reached the model) and
the proxy's `/stats/models` and rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from tests.conftest import RunningProxy
from tests.e2e.clients import NOTES_MARKER, SECRET_MARKER, AgentWorld
from tests.e2e.test_clients import ALLOWED, PIPED, _model_stats, _requests_text
from tests.e2e.test_clients import rooted_policy as rooted_policy  # a fixture, asked for by name
from tests.e2e.test_pypi_clients import _driver, _result, _venv_python, _world

pytestmark = pytest.mark.e2e


def _start(client: str, tmp_path: Path, upstream: ScriptedUpstream, start_proxy: Callable[..., RunningProxy],
           request: pytest.FixtureRequest, responder: Callable[[AgentWorld], Callable[[dict[str, Any]], Reply]],
           ) -> tuple[AgentWorld, RunningProxy]:
    _venv_python(client)
    world = _world(tmp_path, client)
    upstream.responder = responder(world)
    proxy: RunningProxy = start_proxy(upstream.url, policy=request.getfixturevalue("rooted_policy")(world.project))
    return world, proxy


def _refusals_since_user(messages: list[dict[str, Any]]) -> int:
    """The proxy's re-prompts of a text-acting client since the client's own last message: each is the held
    assistant turn and a user message with the reasons."""
    count = 0
    for message in reversed(messages):
        if message.get("role") == "user" and "Rejected" in json.dumps(message.get("content")):
            count += 1
        elif message.get("role") == "user":
            break
    return count


def _sources(proxy: RunningProxy) -> set[str]:
    proxy.flush()
    return {r[0] for r in proxy.rows("SELECT source FROM tool_calls")}


# ---------------------------------------------------------------------------------------------------------- DSPy


def _dspy_text(json_mode: bool, fields: dict[str, Any]) -> str:
    if json_mode:
        return json.dumps(fields)
    return "".join(f"[[ ## {k} ## ]]\n{v if isinstance(v, str) else json.dumps(v)}\n\n" for k, v in fields.items()) \
        + "[[ ## completed ## ]]"


def _dspy_model(world: AgentWorld) -> Callable[[dict[str, Any]], Reply]:
    """ReAct's steps: the pipe then the allowed command, the secret then the notes, then `finish`; the answer."""
    steps = [[("run_shell", {"command": PIPED}), ("run_shell", {"command": ALLOWED})],
             [("read_text", {"path": str(world.secret)}), ("read_text", {"path": str(world.notes)})],
             [("finish", {})]]

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        system, user = messages[0]["content"], messages[1]["content"]
        json_mode = "Outputs will be a JSON object" in system
        if "next_tool_name" not in system:  # the extraction of the answer from the trajectory
            return Reply(content=_dspy_text(json_mode, {"reasoning": "found it", "answer": "done"}))
        done = user.count("[[ ## tool_name_")
        step = steps[min(done, len(steps) - 1)]
        name, args = step[min(_refusals_since_user(messages), len(step) - 1)]
        return Reply(content=_dspy_text(json_mode, {"next_thought": "Next.", "next_tool_name": name,
                                                    "next_tool_args": args}))

    return respond


def test_dspy_react_is_governed_and_counted(tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                           request: pytest.FixtureRequest) -> None:
    """Three runs side by side (ChatAdapter whole and streamed, JSONAdapter): the pipe never runs, the allowed
    command runs once per run, the secret is never read, the notes are; each run is one session with its two
    errors, its steps recorded as `text:dspy_chat` / `text:dspy_json`."""
    world, proxy = _start("dspy", tmp_path, upstream, start_proxy, request, _dspy_model)
    modes = ("chat", "chat-stream", "json")
    results = [_result("dspy", driver) for driver in [_driver("dspy", world, proxy.url + "/v1", m) for m in modes]]
    expected = {"answer": "done", "steps": ["run_shell", "read_text", "finish"]}
    assert results == [expected] * 3, f"{results}\n{_requests_text(upstream)[-3000:]}"
    sent = _requests_text(upstream)
    assert world.calls("head") == [] and world.calls("uv") == [["run", "scripts/search.py", "x"]] * 3
    assert SECRET_MARKER not in sent and NOTES_MARKER in sent
    stats = _model_stats(proxy)
    assert (stats["sessions"], stats["errors"]) == (3, 6), stats
    assert stats["reasons"] == {"pipe": 3, "absolute_path": 3}, stats["reasons"]
    assert _sources(proxy) == {"text:dspy_chat", "text:dspy_json"}


def test_dspy_user_learns_why_a_step_was_blocked(tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                                request: pytest.FixtureRequest) -> None:
    """A model that keeps proposing the pipe: the budget's attempts, then the explanation, which ReAct cannot read
    as a step: it ends the run and its user gets the error; nothing ran."""

    def model(world: AgentWorld) -> Callable[[dict[str, Any]], Reply]:
        return lambda body: Reply(content=_dspy_text(False, {"next_thought": "x", "next_tool_name": "run_shell",
                                                             "next_tool_args": {"command": PIPED}}))

    world, proxy = _start("dspy", tmp_path, upstream, start_proxy, request, model)
    result = _result("dspy", _driver("dspy", world, proxy.url + "/v1", "chat"))
    assert "allowlist-proxy blocked this turn" in json.dumps(result) and PIPED in json.dumps(result), result
    assert world.calls("head") == [] and world.calls("uv") == []
    assert _model_stats(proxy)["reasons"] == {"pipe": 4}


# ------------------------------------------------------------------------------------------------ Open Interpreter


def _oi_text_model(world: AgentWorld) -> Callable[[dict[str, Any]], Reply]:
    """Markdown blocks, streamed a character at a time (as tokens come): the pipe then the allowed command; a
    Python read of the secret then the allowed command again; then the answer."""
    steps = [[f"```shell\n{PIPED}\n```", f"```shell\n{ALLOWED}\n```"],
             [f"```python\nprint(open({str(world.secret)!r}).read())\n```", f"```shell\n{ALLOWED} notes\n```"]]

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        done = sum(1 for m in messages if m.get("role") == "user" and "Code output" in json.dumps(m.get("content")))
        if done >= len(steps):
            return Reply(content="Done: the notes say what they say.", content_chunk=1)
        step = steps[done]
        block = step[min(_refusals_since_user(messages), len(step) - 1)]
        return Reply(content=f"Running it.\n{block}\n", content_chunk=1)

    return respond


def _oi_tools_model(world: AgentWorld) -> Callable[[dict[str, Any]], Reply]:
    steps = [[("execute", {"language": "shell", "code": PIPED}), ("execute", {"language": "shell", "code": ALLOWED})],
             [("execute", {"language": "python", "code": f"print(open({str(world.secret)!r}).read())"}),
              ("execute", {"language": "shell", "code": f"{ALLOWED} notes"})]]

    def respond(body: dict[str, Any]) -> Reply:
        done = refused = 0
        for message in body["messages"]:
            if message.get("role") == "tool":
                text = json.dumps(message.get("content"))
                done, refused = (done, refused + 1) if "Rejected" in text else (done + 1, 0)
        if done >= len(steps):
            return Reply(content="Done: the notes say what they say.")
        step = steps[done]
        return Reply(content="Running it.", tool_calls=[step[min(refused, len(step) - 1)]])

    return respond


@pytest.mark.parametrize("mode", ["text", "tools"])
def test_open_interpreter_is_governed_and_counted(mode: str, tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                                 request: pytest.FixtureRequest) -> None:
    """`auto_run` on: the piped block never runs, the allowed command runs (twice: the second time as the read it is
    allowed), the Python read of the secret is refused; one session with its two errors."""
    model = _oi_text_model if mode == "text" else _oi_tools_model
    world, proxy = _start("open-interpreter", tmp_path, upstream, start_proxy, request, model)
    result = _result("open-interpreter", _driver("open-interpreter", world, proxy.url + "/v1", mode))
    assert result.get("answer") == "Done: the notes say what they say.", f"{result}\n{_requests_text(upstream)[-3000:]}"
    assert world.calls("head") == []
    assert world.calls("uv") == [["run", "scripts/search.py", "x"], ["run", "scripts/search.py", "x", "notes"]]
    assert SECRET_MARKER not in _requests_text(upstream)
    stats = _model_stats(proxy)
    assert (stats["sessions"], stats["errors"]) == (1, 2), stats
    assert stats["reasons"]["pipe"] == 1 and stats["reasons"]["wrapper"] == 1, stats["reasons"]  # python: no shell
    assert _sources(proxy) == ({"text:oi_blocks"} if mode == "text" else {"openai"})


# ----------------------------------------------------------------------------------------------------------- aider


def _edit(fmt: str, path: str, before: str, after: str) -> str:
    if fmt == "whole":
        return f"{path}\n```\n{after}```\n"
    if fmt == "udiff":
        minus = "".join(f"-{line}\n" for line in before.splitlines())
        plus = "".join(f"+{line}\n" for line in after.splitlines())
        return f"```diff\n--- {path}\n+++ {path}\n@@ ... @@\n{minus}{plus}```\n"
    if fmt == "diff-fenced":
        return f"```\n{path}\n<<<<<<< SEARCH\n{before}=======\n{after}>>>>>>> REPLACE\n```\n"
    return f"{path}\n```\n<<<<<<< SEARCH\n{before}=======\n{after}>>>>>>> REPLACE\n```\n"


def _aider_model(fmt: str) -> Callable[[AgentWorld], Callable[[dict[str, Any]], Reply]]:
    """One answer of aider's: an edit of the protected script (refused), then the pipe suggested beside the notes'
    edit (refused), then the notes' edit and the allowed command; in the formats without suggestions, the protected
    edit, then an edit outside the project, then the notes'."""

    def model(world: AgentWorld) -> Callable[[dict[str, Any]], Reply]:
        script = (world.project / "scripts" / "search.py").read_text()
        notes = world.notes.read_text()
        protected = _edit(fmt, "scripts/search.py", script, 'print("pwned")\n')
        mine = _edit(fmt, "notes.txt", notes, notes + "x was found\n")
        if fmt in ("diff", "diff-fenced"):
            answers = [protected, f"{mine}\n```bash\n{PIPED}\n```\n", f"{mine}\n```bash\n{ALLOWED}\n```\n"]
        else:
            answers = [protected, _edit(fmt, str(world.secret), "", "gone\n"), mine]

        def respond(body: dict[str, Any]) -> Reply:
            return Reply(content="I will make the change.\n\n" + answers[min(_refusals_since_user(body["messages"]),
                                                                             len(answers) - 1)])

        return respond

    return model


@pytest.mark.parametrize("fmt", ["diff", "whole", "udiff", "diff-fenced"])
def test_aider_is_governed_and_counted(fmt: str, tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                      request: pytest.FixtureRequest) -> None:
    """The protected script is never written, the pipe never runs, the file outside the project is never written;
    the notes' edit is applied and the allowed command runs once (its user says yes); one session."""
    world, proxy = _start("aider", tmp_path, upstream, start_proxy, request, _aider_model(fmt))
    script = (world.project / "scripts" / "search.py").read_text()
    stream = "-stream" if fmt == "diff" else ""
    result = _result("aider", _driver("aider", world, proxy.url + "/v1", fmt + stream, "notes.txt"))
    assert result.get("edited") == ["notes.txt"], f"{result}\n{_requests_text(upstream)[-3000:]}"
    assert (world.project / "scripts" / "search.py").read_text() == script, "the protected script was written"
    assert world.secret.read_text() == SECRET_MARKER + "\n" and "x was found" in world.notes.read_text()
    assert world.calls("head") == []
    assert world.calls("uv") == ([["run", "scripts/search.py", "x"]] if fmt in ("diff", "diff-fenced") else [])
    stats = _model_stats(proxy)
    second = {"pipe": 1} if fmt in ("diff", "diff-fenced") else {"absolute_path": 1}
    assert (stats["sessions"], stats["errors"], stats["reasons"]) == (1, 2, {"protected_path": 1, **second}), stats
    assert _sources(proxy) == {f"text:aider_{fmt.replace('-', '_')}"}


# (client, driver arguments, what the model keeps answering)
BLOCKED = [("aider", ("diff", "notes.txt"), _edit("diff", "scripts/search.py", "", "print(1)\n")),
           ("open-interpreter", ("text",), f"```shell\n{PIPED}\n```\n")]


@pytest.mark.parametrize(("client", "arguments", "answer"), BLOCKED, ids=["aider", "open-interpreter"])
def test_text_agent_user_learns_why_a_turn_was_blocked(client: str, arguments: tuple[str, ...], answer: str,
                                                       tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                                       request: pytest.FixtureRequest) -> None:
    """A model that keeps proposing what the policy refuses: the budget's attempts, then the explanation as the
    turn's answer, which the agent shows its user; nothing ran or was written."""
    def model(world: AgentWorld) -> Callable[[dict[str, Any]], Reply]:
        return lambda body: Reply(content=answer, content_chunk=1)

    world, proxy = _start(client, tmp_path, upstream, start_proxy, request, model)
    script = (world.project / "scripts" / "search.py").read_text()
    result = _result(client, _driver(client, world, proxy.url + "/v1", *arguments))
    assert "allowlist-proxy blocked this turn" in str(result.get("answer")), result
    assert (world.project / "scripts" / "search.py").read_text() == script
    assert world.calls("head") == [] and world.calls("uv") == []
    assert _model_stats(proxy)["errors"] == 4
