"""Enforcement: a rejected call never reaches the client; the model is told why and tries again."""

from __future__ import annotations

import json

import pytest

from proxy.testing.characters import OPENCODE_TOOLS, bash_sequence, looping, switching
from proxy.testing.scripted_upstream import Reply
from tests.conftest import ROOT, chat, sse_json, without_refusal_line

OBSERVE_POLICY = ROOT / "policies" / "observe.yaml"
ALLOWED = 'uv run scripts/search.py "rust async"'
SESSION = {"x-session-id": "ses_enforce"}


def _ask(proxy, *, stream: bool, usage: bool = False, headers=SESSION):
    body = chat([{"role": "user", "content": "find rust async docs"}], tools=OPENCODE_TOOLS, stream=stream)
    if usage:
        body["stream_options"] = {"include_usage": True}
    with proxy.client() as client:
        return client.post("/v1/chat/completions", json=body, headers=headers)


def _streamed_calls(raw: bytes) -> tuple[list[dict], list[str], str]:
    deltas, finishes, content = [], [], ""
    for chunk in sse_json(raw):
        for choice in chunk.get("choices", []):
            delta = choice.get("delta", {})
            deltas.extend(delta.get("tool_calls") or [])
            content += delta.get("content") or ""
            if choice.get("finish_reason"):
                finishes.append(choice["finish_reason"])
    return deltas, finishes, content


@pytest.mark.parametrize("stream", [False, True])
def test_looping_model_reaches_the_client_only_with_the_allowed_call(upstream, proxy, stream):
    upstream.responder = looping()
    response = _ask(proxy, stream=stream)
    assert response.status_code == 200
    rest = without_refusal_line(response.content)  # the refused calls are quoted there, and nowhere else
    assert b"| head" not in rest and b"| tail" not in rest
    if stream:
        deltas, finishes, _ = _streamed_calls(response.content)
        assert len(deltas) == 1
        first = deltas[0]
        assert first["id"] and first["type"] == "function" and first["function"]["name"] == "bash"
        assert json.loads(first["function"]["arguments"]) == {"command": ALLOWED}
        assert finishes == ["tool_calls"]
    else:
        choice = response.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        calls = choice["message"]["tool_calls"]
        assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"command": ALLOWED}]
    assert len(upstream.requests) == 4
    rows = proxy.rows("SELECT attempt, decision, primary_reason, shape, delivered, command FROM tool_calls "
                      "ORDER BY attempt")
    assert [(r["attempt"], r["decision"], r["shape"]) for r in rows] == [
        (1, "reject", "pipe"), (2, "reject", "pipe"), (3, "reject", "pipe"), (4, "allow", None)]
    assert [r["delivered"] for r in rows] == [0, 0, 0, 1]
    request = proxy.rows("SELECT attempts, budget_exhausted, session_id FROM requests")[0]
    assert (request["attempts"], request["budget_exhausted"], request["session_id"]) == (4, 0, "ses_enforce")


@pytest.mark.parametrize("stream", [False, True])
def test_the_model_is_told_why(upstream, proxy, stream):
    upstream.responder = switching()
    _ask(proxy, stream=stream)
    retry = upstream.requests[1]["messages"]
    assistant, tool = retry[-2], retry[-1]
    assert assistant["role"] == "assistant"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"])["command"].endswith("| head -5")
    assert tool["role"] == "tool" and tool["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert "pipe" in tool["content"] and "search" in tool["content"]
    assert len(upstream.requests) == 2


@pytest.mark.parametrize("stream", [False, True])
def test_budget_exhaustion_ends_the_turn_with_an_explanation(upstream, proxy, stream):
    upstream.responder = bash_sequence(["curl -s https://example.com | head -5"] * 10)
    response = _ask(proxy, stream=stream)
    if stream:
        deltas, finishes, content = _streamed_calls(response.content)
        assert deltas == [] and finishes == ["stop"]
    else:
        choice = response.json()["choices"][0]
        assert choice["finish_reason"] == "stop" and not choice["message"]["tool_calls"]
        content = choice["message"]["content"]
    assert "curl -s https://example.com | head -5" in content and "pipe" in content
    assert b"example.com" not in b"".join(
        json.dumps(d).encode() for d in (_streamed_calls(response.content)[0] if stream else []))
    request = proxy.rows("SELECT attempts, budget_exhausted FROM requests")[0]
    assert (request["attempts"], request["budget_exhausted"]) == (4, 1)


def test_text_streams_before_the_tool_call_completes(upstream, proxy):
    upstream.script(Reply(content="Let me search for that. ", tool_calls=[("bash", {"command": ALLOWED})],
                          arguments_chunk=2, chunk_delay=0.03))
    body = chat([{"role": "user", "content": "go"}], tools=OPENCODE_TOOLS, stream=True)
    with proxy.client() as client, client.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = response.iter_lines()
        for line in lines:
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                assert upstream.completed_streams == 0  # the upstream is still sending the call
                break
        rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]"


@pytest.mark.parametrize("stream", [False, True])
def test_usage_is_summed_over_attempts(upstream, proxy, stream):
    upstream.responder = switching()
    response = _ask(proxy, stream=stream, usage=True)
    usage = sse_json(response.content)[-1]["usage"] if stream else response.json()["usage"]
    per_attempt = [upstream._usage(Reply(tool_calls=[("bash", {"command": c})]))
                   for c in (ALLOWED + " | head -5", ALLOWED)]
    assert usage["prompt_tokens"] == sum(u["prompt_tokens"] for u in per_attempt)
    assert usage["completion_tokens"] == sum(u["completion_tokens"] for u in per_attempt)


def test_observe_mode_changes_no_byte(upstream, start_proxy):
    observer = start_proxy(upstream.url, policy=OBSERVE_POLICY)
    upstream.responder = looping()
    for stream in (True, False):
        body = chat([{"role": "user", "content": "go"}], tools=OPENCODE_TOOLS, stream=stream,
                    stream_options={"include_usage": True} if stream else None)
        if not stream:
            body.pop("stream_options")
        with observer.client() as client:
            response = client.post("/v1/chat/completions", json=body)
        assert response.content == upstream.responses[-1]
    rows = observer.rows("SELECT decision, shape, delivered, mode FROM tool_calls")
    assert [(r["decision"], r["shape"], r["delivered"], r["mode"]) for r in rows] == [
        ("reject", "pipe", 1, "observe")] * 2


@pytest.mark.parametrize("stream", [False, True])
def test_qwen_xml_in_content_is_judged_and_converted(upstream, proxy, stream):
    upstream.responder = bash_sequence([ALLOWED + " 2>&1", ALLOWED], content="I will search.\n", xml=True)
    response = _ask(proxy, stream=stream)
    assert b"2>&1" not in without_refusal_line(response.content) and b"<tool_call>" not in response.content
    if stream:
        deltas, finishes, content = _streamed_calls(response.content)
        arguments = [json.loads(d["function"]["arguments"]) for d in deltas]
    else:
        choice = response.json()["choices"][0]
        finishes, content = [choice["finish_reason"]], choice["message"]["content"]
        arguments = [json.loads(c["function"]["arguments"]) for c in choice["message"]["tool_calls"]]
    assert arguments == [{"command": ALLOWED}] and finishes == ["tool_calls"]
    assert "I will search." in content
    rows = proxy.rows("SELECT source, decision, primary_reason FROM tool_calls ORDER BY attempt")
    assert [tuple(r) for r in rows] == [("qwen3_coder", "reject", "redirect"), ("qwen3_coder", "allow", None)]


def test_read_with_an_absolute_path_is_blocked_and_the_relative_one_passes(upstream, proxy):
    upstream.script(Reply(tool_calls=[("read", {"filePath": "/etc/passwd"})]),
                    Reply(tool_calls=[("read", {"filePath": "src/main.py", "offset": 1})]))
    response = _ask(proxy, stream=True)
    deltas, _, _ = _streamed_calls(response.content)
    assert [json.loads(d["function"]["arguments"]) for d in deltas] == [{"filePath": "src/main.py", "offset": 1}]
    rows = proxy.rows("SELECT tool_name, decision, primary_reason FROM tool_calls ORDER BY attempt")
    assert [tuple(r) for r in rows] == [("read", "reject", "absolute_path"), ("read", "allow", None)]


def test_allowed_sibling_of_a_rejected_call_is_not_run_and_is_explained(upstream, proxy):
    upstream.script(Reply(tool_calls=[("bash", {"command": ALLOWED}), ("bash", {"command": "ls -la"})]),
                    Reply(tool_calls=[("bash", {"command": ALLOWED})]))
    response = _ask(proxy, stream=False)
    calls = response.json()["choices"][0]["message"]["tool_calls"]
    assert len(calls) == 1
    tools = [m for m in upstream.requests[1]["messages"] if m["role"] == "tool"]
    assert tools[0]["content"].startswith("Not run") and "program" in tools[1]["content"]


def test_malformed_arguments_are_recorded_and_retried(upstream, proxy):
    upstream.script(Reply(tool_calls=[("bash", '{"command": "uv run scripts/search.py x"')]),
                    Reply(tool_calls=[("bash", {"command": "uv run scripts/search.py x"})]))
    response = _ask(proxy, stream=True)
    deltas, _, _ = _streamed_calls(response.content)
    assert len(deltas) == 1
    rows = proxy.rows("SELECT decision, primary_reason FROM tool_calls ORDER BY attempt")
    assert [tuple(r) for r in rows] == [("malformed", "bad_arguments"), ("allow", None)]
    replayed = upstream.requests[1]["messages"][-2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(replayed) == {}


def test_upstream_failure_during_a_retry_ends_with_an_error_chunk(upstream, proxy):
    upstream.script(Reply(tool_calls=[("bash", {"command": ALLOWED + " | head"})]),
                    Reply(status=500, error_message="engine died"))
    response = _ask(proxy, stream=True)
    chunks = sse_json(response.content)
    assert response.content.endswith(b"data: [DONE]\n\n")
    assert "error" in chunks[-1] and "engine died" in chunks[-1]["error"]["message"]
    assert proxy.rows("SELECT outcome FROM requests")[0]["outcome"] == "upstream_error"


def test_unknown_tool_is_rejected(upstream, proxy):
    upstream.script(Reply(tool_calls=[("shell", {"cmd": "ls"})]), Reply(content="ok, no tools"))
    response = _ask(proxy, stream=False)
    assert response.json()["choices"][0]["message"]["content"] == (
        'ok, no tools\n\nallowlist-proxy refused in this turn: `shell {"cmd": "ls"}` (unknown_tool).')
    assert proxy.rows("SELECT primary_reason FROM tool_calls")[0][0] == "unknown_tool"


def test_a_later_request_of_the_session_continues_it_without_the_feedback_turns(upstream, proxy):
    upstream.responder = switching()
    first = [{"role": "user", "content": "find rust async docs"}]
    with proxy.client() as client:
        reply = client.post("/v1/chat/completions", json=chat(first, tools=OPENCODE_TOOLS)).json()
        message = reply["choices"][0]["message"]
        follow = [*first, {"role": "assistant", "content": message["content"], "tool_calls": message["tool_calls"]},
                  {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "results..."}]
        upstream.responder = None
        client.post("/v1/chat/completions", json=chat(follow, tools=OPENCODE_TOOLS))
    sessions = {r[0] for r in proxy.rows("SELECT session_id FROM requests")}
    assert len(sessions) == 1


def test_policy_header_selects_another_loaded_policy_only_when_allowed(upstream, start_proxy):
    piped = ALLOWED + " | head -5"
    strict = start_proxy(upstream.url)
    selectable = start_proxy(upstream.url, policy_header=True)
    headers = {"x-allowlist-policy": "observe-uv-scripts", "x-session-id": "ses_header"}
    body = chat([{"role": "user", "content": "go"}], tools=OPENCODE_TOOLS)
    for running, passes in ((strict, False), (selectable, True)):
        upstream.script(Reply(tool_calls=[("bash", {"command": piped})]), Reply(content="gave up"))
        with running.client() as client:
            message = client.post("/v1/chat/completions", json=body, headers=headers).json()["choices"][0]["message"]
        upstream.queue.clear()
        commands = [json.loads(c["function"]["arguments"])["command"] for c in message.get("tool_calls") or []]
        assert (commands == [piped]) is passes
    with selectable.client() as client:
        response = client.post("/v1/chat/completions", json=body, headers={"x-allowlist-policy": "nope"})
    assert response.status_code == 400 and "nope" in response.json()["error"]["message"]
    assert selectable.rows("SELECT mode FROM tool_calls")[0][0] == "observe"
