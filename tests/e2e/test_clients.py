"""Qwen Code, Codex, Claude Code, Cline, Continue, Kilo and an openai-SDK agent, unchanged, through the real
proxy on the shipped strict policy (plus the project's root), in front of a scripted model that streams each
client's dialect and picks the client's own shell and read tools from the offered tools.

The model first proposes `uv run scripts/search.py x | head -5`, then the allowed command; then an
absolute read of a secret outside the project, then an absolute read inside it. Asserted from what really
happened: the stubs' logs (what a shell ran), the upstream's requests (what reached the model) and the
proxy's `/stats/models`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.policy.tools.offered import Offered, offered_tools, properties
from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from tests.conftest import ROOT, RunningProxy
from tests.e2e.clients import CLIENTS, MODEL, NOTES_MARKER, SECRET_MARKER, AgentWorld, find_client, required
from tests.e2e.facts import record
from tests.e2e.responders import REFUSAL_LINE, answers_after_refusal, next_step

pytestmark = pytest.mark.e2e

PIPED = "uv run scripts/search.py x | head -5"
ALLOWED = "uv run scripts/search.py x"
PROMPT = "Search the notes for x, then read the notes."
# Said before each call: a streamed turn whose first attempt is refused sends it once, so the client's history
# (the next request) matches what the proxy delivered, and the conversation stays one session.
NARRATION = "Let me do that."

Call = tuple[str, dict[str, Any]]


def _shell_call(tool: str, command: str, project: Path, offered: Offered) -> Call:
    arguments: dict[str, Any] = {
        "run_shell_command": {"command": command, "is_background": False, "description": "search"},
        "exec_command": {"cmd": command, "workdir": str(project)},  # an absolute workdir inside the root
        "run_commands": {"commands": [command]},
    }.get(tool) or {"command": command}
    if "description" in properties(offered.schema):  # Claude Code's and Kilo's bash ask for one
        arguments["description"] = "search"
    return tool, arguments


def _read_call(tool: str, path: Path, offered: Offered) -> Call:
    if tool == "read_files":
        return tool, {"files": [{"path": str(path)}]}
    # Claude Code's `Read` names it file_path, Continue's `Read` filepath, Kilo's `read` filePath.
    key = next(k for k in ("file_path", "filepath", "filePath", "path") if k in properties(offered.schema))
    return tool, {key: str(path)}


SHELL_TOOLS = ("run_shell_command", "exec_command", "Bash", "bash", "run_commands", "run_shell")
READ_TOOLS = ("read_file", "Read", "read", "read_files", "read_text", "readFile")


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def scripted_model(world_project: Path, secret: Path, notes: Path) -> Callable[[dict[str, Any]], Reply]:
    """Steps of alternatives: a step's k-th call is proposed after k refusals of that step; a tool result
    that is not a refusal means the call ran, and the next step starts."""

    def respond(body: dict[str, Any]) -> Reply:
        offered = offered_tools({"tools": body.get("tools")})
        shell = next((t for t in SHELL_TOOLS if t in offered), None)
        if shell is None:  # a title or side request
            return Reply(content="E2E")
        # Kilo's second shell tool, which no profile names (its command is optional), proposes the pipe.
        piped = (("background_process", {"action": "start", "command": PIPED, "workdir": str(world_project),
                                          "description": "search"}) if "background_process" in offered
                 else _shell_call(shell, PIPED, world_project, offered[shell]))
        steps = [[piped, _shell_call(shell, ALLOWED, world_project, offered[shell])]]
        read = next((t for t in READ_TOOLS if t in offered), None)
        if read is not None:
            steps.append([_read_call(read, secret, offered[read]), _read_call(read, notes, offered[read])])
        return next_step(body, steps, narration=NARRATION)

    return respond


@pytest.fixture
def backend() -> str:
    return "sqlite"


@pytest.fixture
def rooted_policy(tmp_path: Path) -> Callable[[Path], Path]:
    """The shipped strict policy with the world's project as its root."""

    def write(project: Path) -> Path:
        data = yaml.safe_load((ROOT / "policies" / "strict.yaml").read_text())
        data["paths"]["project_root"] = [str(project)]
        folder = tmp_path / "policies"
        folder.mkdir(exist_ok=True)
        path = folder / "strict.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


def _model_stats(proxy: RunningProxy) -> dict[str, Any]:
    proxy.flush()
    with proxy.client() as client:
        models = client.get("/stats/models").json()["models"]
    (stats,) = [m for m in models if m["model"] == MODEL]
    return stats


def _requests_text(upstream: ScriptedUpstream) -> str:
    return "\n".join(json.dumps(body, ensure_ascii=False) for body in upstream.requests)


def facts(proxy: RunningProxy, upstream: ScriptedUpstream, logs: Callable[[str], list[list[str]]], *,
          reads: bool) -> dict[str, bool]:
    """What a run shows (tests/e2e/facts.py): `governed`, the refused calls never ran (the pipe, the read outside)
    and the allowed command did; `counted`, one session whose calls are each recorded with its verdict (calls =
    refused + those that ran). Whether the read inside passed is the root's fact, not these."""
    sent = _requests_text(upstream)
    ran = logs("uv")
    governed = logs("head") == [] and logs("tail") == [] and ran == [["run", "scripts/search.py", "x"]] and \
        SECRET_MARKER not in sent
    try:
        stats = _model_stats(proxy)
    except ValueError:  # nothing of the model's recorded
        return {"governed": governed, "counted": False}
    done = len(ran) + (1 if reads and NOTES_MARKER in sent else 0)
    counted = stats["sessions"] == 1 and stats["tool_calls"] == stats["errors"] + done and stats["errors"] >= 1
    return {"governed": governed, "counted": counted}


def _assert_governed(proxy: RunningProxy, upstream: ScriptedUpstream, logs: Callable[[str], list[list[str]]],
                     *, reads: bool, profile: str | None) -> None:
    assert logs("head") == [] and logs("tail") == [], "the blocked pipe ran"
    assert logs("uv") == [["run", "scripts/search.py", "x"]], "the allowed command ran other than once"
    sent = _requests_text(upstream)
    assert SECRET_MARKER not in sent, "a read outside the project reached the model"
    if reads:
        assert NOTES_MARKER in sent, "the read inside the project did not reach the model"
    stats = _model_stats(proxy)
    assert stats["sessions"] == 1, stats
    # The model's calls: the pipe (refused), the command, then the read outside (refused) and the one inside.
    expected = {"pipe": 1, "absolute_path": 1} if reads else {"pipe": 1}
    assert (stats["tool_calls"], stats["errors"], stats["primary_reasons"]) == (2 * len(expected), len(expected),
                                                                               expected), stats
    assert stats["loops"]["count"] == 0 and stats["recovery_rate"] == 1.0, stats
    if profile is not None:
        recorded = {r[0] for r in proxy.rows("SELECT profiles FROM requests WHERE profiles IS NOT NULL")}
        assert profile in ",".join(recorded)


# Kilo runs only on the shipped policy below (its run there shows all of this and the learned root): its own
# start-up takes 10-30 s of a loaded machine.
@pytest.mark.parametrize("client", sorted(set(CLIENTS) - {"kilo"}))
def test_agent_cli_is_governed_unchanged(client: str, tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                         rooted_policy: Callable[[Path], Path]) -> None:
    spec = CLIENTS[client]
    binary = required(find_client(spec))
    world = AgentWorld(tmp_path / client, spec, binary)
    upstream.responder = scripted_model(world.project, world.secret, world.notes)
    proxy = start_proxy(upstream.url, policy=rooted_policy(world.project))
    base_url = proxy.url + "/v1"
    world.configure(base_url)
    run = world.run(base_url, PROMPT)
    context = f"{run.describe()}\n--- upstream requests\n{_requests_text(upstream)[-6000:]}"
    assert upstream.requests, f"{client} never reached the upstream\n{context}"
    try:
        _assert_governed(proxy, upstream, world.calls, reads=client != "codex", profile=client)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{context}") from None


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_agent_cli_reads_its_own_project_on_the_shipped_policy(client: str, tmp_path: Path,
                                                               upstream: ScriptedUpstream, start_proxy) -> None:
    """No root configured: the proxy learns it from what the client states about its working directory, so the
    read inside the project passes, the one outside is refused, and the run is one session."""
    spec = CLIENTS[client]
    binary = required(find_client(spec))
    world = AgentWorld(tmp_path / client, spec, binary)
    upstream.responder = scripted_model(world.project, world.secret, world.notes)
    proxy = start_proxy(upstream.url, policy=ROOT / "policies" / "strict.yaml")
    base_url = proxy.url + "/v1"
    world.configure(base_url)
    run = world.run(base_url, PROMPT)
    context = f"{run.describe()}\n--- upstream requests\n{_requests_text(upstream)[-6000:]}"
    roots = {r[0] for r in proxy.rows("SELECT project_root FROM requests WHERE project_root IS NOT NULL")}
    record(client, find_client(spec)[1], root_from_text=roots in ({str(world.project.resolve())},
                                                                  {str(world.project)}),
           **facts(proxy, upstream, world.calls, reads=client != "codex"))
    try:
        _assert_governed(proxy, upstream, world.calls, reads=client != "codex", profile=client)
        assert roots == {str(world.project.resolve())} or roots == {str(world.project)}, roots
    except AssertionError as error:
        raise AssertionError(f"{error}\n{context}") from None


ANSWER = "The notes mention x twice."


def _shown(stdout: str) -> str:
    """What a client printed for its user: its final text where it prints JSON events (Cline's `run_result`)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("type") == "run_result" and isinstance(event.get("text"), str):
                return str(event["text"])
    return stdout


# Kilo's start-up alone takes 10-30 s of a loaded machine; its streamed chat is OpenCode's (tests/e2e/test_opencode.py).
@pytest.mark.parametrize("client", sorted(set(CLIENTS) - {"kilo"}))
def test_agent_cli_user_sees_the_answer_after_a_refusal(client: str, tmp_path: Path, upstream: ScriptedUpstream,
                                                        start_proxy, rooted_policy: Callable[[Path], Path]) -> None:
    """The model narrates, proposes the pipe (refused), then answers in text: what the client prints for its user
    holds the answer and the line that says what was refused; nothing ran; the run is one session."""
    spec = CLIENTS[client]
    binary = required(find_client(spec))
    world = AgentWorld(tmp_path / client, spec, binary)

    def piped(body: dict[str, Any]) -> Call | None:
        offered = offered_tools({"tools": body.get("tools")})
        shell = next((t for t in SHELL_TOOLS if t in offered), None)
        users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
        if shell is None or not users or PROMPT not in _text(users[-1]):  # a side request (Qwen Code's memory)
            return None
        return _shell_call(shell, PIPED, world.project, offered[shell])

    upstream.responder = answers_after_refusal(piped, narration=NARRATION, answer=ANSWER)
    proxy = start_proxy(upstream.url, policy=rooted_policy(world.project))
    world.configure(proxy.url + "/v1")
    run = world.run(proxy.url + "/v1", PROMPT)
    context = f"{run.describe()}\n--- upstream requests\n{_requests_text(upstream)[-6000:]}"
    shown = _shown(run.stdout)
    assert ANSWER in shown and REFUSAL_LINE in shown, context
    assert shown.count(NARRATION) <= 1, context
    assert world.calls("head") == [] and world.calls("uv") == [], context
    stats = _model_stats(proxy)
    assert (stats["sessions"], stats["errors"]) == (1, 1), stats


# ---------------------------------------------------------------- the openai Python SDK


def _sdk_agent(base_url: str, project: Path, bin_dir: Path, max_turns: int = 8) -> list[dict[str, Any]]:
    """A small agent built on the openai SDK, streaming, with its own shell and read tools."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
    tools = [
        {"type": "function", "function": {"name": "run_shell", "description": "Run a command", "parameters": {
            "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
        {"type": "function", "function": {"name": "read_text", "description": "Read a text file", "parameters": {
            "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    ]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent."},
                                      {"role": "user", "content": PROMPT}]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    for _ in range(max_turns):
        calls: dict[int, dict[str, Any]] = {}
        content = ""
        for chunk in client.chat.completions.create(model=MODEL, messages=messages, tools=tools, stream=True):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content += delta.content or ""
            for part in delta.tool_calls or []:
                call = calls.setdefault(part.index, {"id": part.id, "name": "", "arguments": ""})
                call["name"] += (part.function.name or "") if part.function else ""
                call["arguments"] += (part.function.arguments or "") if part.function else ""
        if not calls:
            break
        messages.append({"role": "assistant", "content": content or None, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls.values()]})
        for call in calls.values():
            arguments = json.loads(call["arguments"])
            if call["name"] == "run_shell":
                done = subprocess.run(["bash", "-c", arguments["command"]], cwd=project, env=env,
                                      capture_output=True, text=True, timeout=30)
                result = done.stdout + done.stderr
            else:
                result = Path(arguments["path"]).read_text()
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return messages


def test_openai_sdk_agent_is_governed(tmp_path: Path, upstream: ScriptedUpstream, start_proxy,
                                      rooted_policy: Callable[[Path], Path]) -> None:
    """An SDK-built agent's own tools: `run_shell {command}` is judged as a shell by its schema alone; its
    `read_text {path}` is governed by a profile the operator adds to the policy."""
    world = AgentWorld(tmp_path / "sdk", CLIENTS["qwen-code"], Path("/nonexistent"))
    path = rooted_policy(world.project)
    data = yaml.safe_load(path.read_text())
    data["profiles"] = {"my-sdk-agent": {"tools": {"read_text": {"paths": ["path"]}}}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    upstream.responder = scripted_model(world.project, world.secret, world.notes)
    proxy = start_proxy(upstream.url, policy=path)
    _sdk_agent(proxy.url + "/v1", world.project, world.bin)
    _assert_governed(proxy, upstream, world.calls, reads=True, profile="my-sdk-agent")
