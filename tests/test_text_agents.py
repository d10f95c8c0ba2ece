"""DSPy ReAct, aider, Open Interpreter and mini-swe-agent's tool config through the real proxy, each request written
as the client writes it (its first request captured from the real package: tests/text_clients_data/), in front of the
scripted upstream: their actions judged, re-prompted and recorded with `source: text:<format>`, their runs one
session each, their protocol commands allowed for them alone; and a client nobody recognises counted, not blocked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.testing.scripted_upstream import Reply
from tests.conftest import MODEL, sse_json

SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])
DATA = Path(__file__).parent / "text_clients_data"
TOOLS = Path(__file__).parent / "policy" / "client_tools"
ALLOWED = "uv run scripts/search.py x"
PIPED = "uv run scripts/search.py x | head -5"


def _messages(name: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = json.loads((DATA / f"{name}.json").read_text())["messages"]
    return messages


def _post(proxy: Any, body: dict[str, Any], **headers: str) -> Any:
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json={"model": MODEL, **body}, headers=headers)
    assert response.status_code == 200, response.text
    return response


def _said(response: Any, stream: bool) -> str:
    if not stream:
        return str(response.json()["choices"][0]["message"]["content"])
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in sse_json(response.content) if c["choices"])


def _dspy(name: str, args: dict[str, Any]) -> str:
    return (f"[[ ## next_thought ## ]]\ngo\n\n[[ ## next_tool_name ## ]]\n{name}\n\n[[ ## next_tool_args ## ]]\n"
            f"{json.dumps(args)}\n\n[[ ## completed ## ]]")


def _step(messages: list[dict[str, Any]], k: int, name: str, args: dict[str, Any], seen: str) -> list[dict[str, Any]]:
    """The next ReAct request: its trajectory with step k added, as DSPy renders it."""
    user = messages[1]["content"]
    head, tail = user.split("[[ ## trajectory ## ]]\n", 1)
    trajectory, respond = tail.split("\n\nRespond with", 1) if "\n\nRespond with" in tail else (tail, "")
    step = (f"[[ ## thought_{k} ## ]]\ngo\n\n[[ ## tool_name_{k} ## ]]\n{name}\n\n[[ ## tool_args_{k} ## ]]\n"
            f"{json.dumps(args)}\n\n[[ ## observation_{k} ## ]]\n{seen}")
    trajectory = f"{trajectory.rstrip()}\n\n\n{step}" if trajectory.strip() else step
    content = f"{head}[[ ## trajectory ## ]]\n{trajectory}\n\nRespond with{respond}"
    return [messages[0], {"role": "user", "content": content}]


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [False, True])
def test_dspy_react_steps_are_judged_reprompted_and_one_session(upstream, proxy, stream: bool) -> None:
    first = _messages("dspy-chat")
    upstream.script(Reply(content=_dspy("run_shell", {"command": PIPED})),
                    Reply(content=_dspy("run_shell", {"command": ALLOWED})),
                    Reply(content=_dspy("read_text", {"path": "/etc/passwd"})),
                    Reply(content=_dspy("finish", {})))
    said = _said(_post(proxy, {"messages": first, "stream": stream}), stream)
    assert "head" not in said and ALLOWED in said
    retry = upstream.requests[1]["messages"]
    assert retry[-2]["role"] == "assistant" and retry[-1]["role"] == "user" and "pipe" in retry[-1]["content"]
    second = _step(first, 0, "run_shell", {"command": ALLOWED}, "results for x")
    said = _said(_post(proxy, {"messages": second, "stream": stream}), stream)
    assert "finish" in said and "/etc/passwd" not in said
    proxy.flush()
    rows = proxy.rows("SELECT tool_name, decision, source, session_id FROM tool_calls ORDER BY created_at, call_index")
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("run_shell", "reject", "text:dspy_chat"), ("run_shell", "allow", "text:dspy_chat"),
        ("read_text", "reject", "text:dspy_chat"), ("finish", "allow", "text:dspy_chat")]
    assert len({r[3] for r in rows}) == 1, "one ReAct run, one session"


@SQLITE_ONLY
def test_dspy_json_answer_that_is_not_one_object_is_refused(upstream, proxy) -> None:
    upstream.script(Reply(content='Sure: {"next_thought": "x", "next_tool_name": "run_shell", "next_tool_args": '
                                  '{"command": "uv run scripts/search.py x"}}'),
                    Reply(content=json.dumps({"next_thought": "x", "next_tool_name": "run_shell",
                                              "next_tool_args": {"command": ALLOWED}})))
    said = _said(_post(proxy, {"messages": _messages("dspy-json")}), False)
    assert said.startswith("{") and len(upstream.requests) == 2
    assert "unjudgeable" in upstream.requests[1]["messages"][-1]["content"]


def _edit(path: str, search: str, replace: str) -> str:
    return f"I will edit it.\n\n{path}\n```\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n```\n"


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [False, True])
def test_aider_protected_write_and_pipe_refused(upstream, proxy, stream: bool) -> None:
    upstream.script(Reply(content=_edit("scripts/search.py", "print('x')\n", "print('pwned')\n")),
                    Reply(content=_edit("notes.txt", "NOTES\n", "NOTES2\n") + f"\n```bash\n{PIPED}\n```\n"),
                    Reply(content=_edit("notes.txt", "NOTES\n", "NOTES2\n") + f"\n```bash\n{ALLOWED}\n```\n"))
    said = _said(_post(proxy, {"messages": _messages("aider-diff"), "stream": stream}), stream)
    assert "pwned" not in said and "head" not in said and ALLOWED in said
    proxy.flush()
    rows = proxy.rows("SELECT tool_name, decision, reasons, source FROM tool_calls ORDER BY created_at, call_index")
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("aider_edit", "reject", "text:aider_diff"), ("aider_edit", "allow", "text:aider_diff"),
        ("aider_shell", "reject", "text:aider_diff"), ("aider_edit", "allow", "text:aider_diff"),
        ("aider_shell", "allow", "text:aider_diff")]
    assert "protected_path" in rows[0][2] and "pipe" in rows[2][2]


def _oi_reply(text: str) -> Reply:
    return Reply(content=text, content_chunk=1)  # a token at a time, as a GPU streams it


@SQLITE_ONLY
def test_open_interpreter_blocks_judged_as_they_stream(upstream, proxy) -> None:
    upstream.script(_oi_reply(f"Searching.\n```shell\n{PIPED}\n```\n"),
                    _oi_reply("Reading.\n```python\nprint(open('/etc/passwd').read())\n```\n"),
                    _oi_reply(f"Searching.\n```shell\n{ALLOWED}\n```\n"))
    said = _said(_post(proxy, {"messages": _messages("open-interpreter-text"), "stream": True}), True)
    assert said == f"Searching.\n```shell\n{ALLOWED}\n```\n"
    proxy.flush()
    rows = proxy.rows("SELECT tool_name, decision, reasons, source FROM tool_calls ORDER BY created_at, call_index")
    assert [(r[0], r[1], r[3]) for r in rows] == [("execute", "reject", "text:oi_blocks")] * 2 + [
        ("execute", "allow", "text:oi_blocks")]
    assert "pipe" in rows[0][2] and "wrapper" in rows[1][2]


@SQLITE_ONLY
def test_open_interpreter_tool_calls_are_one_session(upstream, proxy) -> None:
    """Open Interpreter sends a delivered turn back as two messages (its text, then the call with empty text) and
    renames the call `toolu_N`: its steps still continue one session."""
    tools = json.loads((TOOLS / "open-interpreter.json").read_text())["tools"]
    system = {"role": "system", "content": "You are Open Interpreter, a world-class programmer."}
    user = {"role": "user", "content": "Search the notes for x."}
    calls = [("execute", {"language": "shell", "code": ALLOWED}), ("execute", {"language": "shell", "code": "pwd"})]
    upstream.script(Reply(content="Running.", tool_calls=[calls[0]]), Reply(content="Again.", tool_calls=[calls[1]]),
                    Reply(content="Again.", tool_calls=[("execute", {"language": "shell", "code": ALLOWED})]),
                    Reply(content="Done."))
    history: list[dict[str, Any]] = [system, user]
    for n in range(3):
        body = _post(proxy, {"messages": history, "tools": tools, "stream": True}).content
        chunks = [c for c in sse_json(body) if c["choices"]]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        delivered = [t for c in chunks for t in c["choices"][0]["delta"].get("tool_calls") or []]
        if not delivered:
            break
        function = delivered[0]["function"]
        history += [{"role": "assistant", "content": text},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": f"toolu_{n + 1}", "type": "function", "function": function}]},
                    {"role": "tool", "name": "execute", "content": "ok", "tool_call_id": f"toolu_{n + 1}"}]
    proxy.flush()
    sessions = {r[0] for r in proxy.rows("SELECT session_id FROM requests")}
    assert len(sessions) == 1, sessions
    reasons = [r[0] for r in proxy.rows("SELECT reasons FROM tool_calls WHERE decision = 'reject'")]
    assert len(reasons) == 1 and "program" in reasons[0]


BASH = {"type": "function", "function": {"name": "bash", "description": "Execute a bash command", "parameters": {
    "type": "object", "properties": {"command": {"type": "string", "description": "The bash command to execute"}},
    "required": ["command"]}}}
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@SQLITE_ONLY
def test_mini_swe_agent_submits_through_its_bash_tool(upstream, proxy) -> None:
    """Its end-of-run sentinel is allowed for mini-swe-agent (recognised by its own prompt), exactly, and for no other
    client."""
    upstream.script(Reply(content="Done.", tool_calls=[("bash", {"command": SUBMIT})]),
                    Reply(content="Done.", tool_calls=[("bash", {"command": SUBMIT + " && rm -rf /"})]),
                    Reply(content="ok"),
                    Reply(content="Done.", tool_calls=[("bash", {"command": SUBMIT})]),
                    Reply(content="ok"))
    mine = _post(proxy, {"messages": _messages("mini-swe-agent-tools"), "tools": [BASH]}).json()
    assert mine["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == json.dumps({"command": SUBMIT})
    _post(proxy, {"messages": _messages("mini-swe-agent-tools"), "tools": [BASH]})
    _post(proxy, {"messages": [{"role": "user", "content": "hi"}], "tools": [BASH]})
    proxy.flush()
    rows = proxy.rows("SELECT decision FROM tool_calls ORDER BY created_at, call_index")
    assert [r[0] for r in rows] == ["allow", "reject", "reject"]


@SQLITE_ONLY
def test_an_unrecognised_client_without_tools_is_counted_never_blocked(upstream, proxy) -> None:
    from proxy.stats.prometheus import UNGOVERNED_TEXT

    counter = UNGOVERNED_TEXT.labels(MODEL, "unrecognised")
    before = counter._value.get()
    block = f"Run this:\n```bash\n{PIPED}\n```\n"
    upstream.script(Reply(content=block), Reply(content="```python\nprint(1)\n```"), Reply(content=block),
                    Reply(content=block), Reply(content="no code here"))
    assert _said(_post(proxy, {"messages": [{"role": "user", "content": "help"}]}), False) == block
    _post(proxy, {"messages": [{"role": "user", "content": "help"}], "stream": True})
    _post(proxy, {"messages": [{"role": "user", "content": "title"}]}, **{"user-agent": "opencode/1.18"})
    _post(proxy, {"messages": [{"role": "user", "content": "help"}], "tools": [BASH]})
    _post(proxy, {"messages": [{"role": "user", "content": "help"}]})
    assert counter._value.get() == before + 2, "counted: the two unrecognised answers holding a code block"
    assert proxy.rows("SELECT count(*) FROM tool_calls WHERE source LIKE 'text:%'")[0][0] == 0
    proxy.flush()
    with proxy.client() as client:
        (entry,) = client.get("/stats/models").json()["models"]
    assert entry["ungoverned_text_actions"] == 2
