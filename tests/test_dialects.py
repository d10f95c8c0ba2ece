"""No unguarded route: the Responses API, the Anthropic Messages API and raw completions are judged too,
and every other /v1/* route is forwarded only when the policy lists it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from proxy.stats.models import model_stats
from proxy.testing.characters import OPENCODE_TOOLS, bash_sequence, looping, switching
from proxy.testing.scripted_upstream import Reply
from tests.conftest import MODEL, ROOT, chat, sse_json

OBSERVE_POLICY = ROOT / "policies" / "observe.yaml"
# For tests that assert nothing about the store: one database is enough (the fixture runs each on every backend).
SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])
ALLOWED = 'uv run scripts/search.py "rust async"'
PIPED = ALLOWED + " | head -5"

# The same tools in each dialect's own shape.
RESPONSES_TOOLS = [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
                    "parameters": t["function"]["parameters"]} for t in OPENCODE_TOOLS]
MESSAGES_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                   "input_schema": t["function"]["parameters"]} for t in OPENCODE_TOOLS]


def responses_body(text: str = "find rust async docs", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "input": [{"type": "message", "role": "user", "content": text}],
            "tools": RESPONSES_TOOLS, **extra}


def messages_body(text: str = "find rust async docs", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 1024, "messages": [{"role": "user", "content": text}],
            "tools": MESSAGES_TOOLS, **extra}


def named_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """`event:` name and JSON data of every event of an SSE body."""
    out = []
    for block in raw.decode().split("\n\n"):
        lines = block.splitlines()
        if not lines:
            continue
        name = next((line[7:] for line in lines if line.startswith("event: ")), "")
        data = "\n".join(line[6:] for line in lines if line.startswith("data: "))
        out.append((name, json.loads(data)))
    return out


# ---------------------------------------------------------------- what each route delivered


def responses_calls(raw: bytes, stream: bool) -> list[dict[str, Any]]:
    """The function calls the client received, as {name, call_id, arguments} (arguments parsed)."""
    if not stream:
        output = json.loads(raw)["output"]
        return [{"name": i["name"], "call_id": i["call_id"], "arguments": json.loads(i["arguments"])}
                for i in output if i["type"] == "function_call"]
    calls = []
    for name, data in named_events(raw):
        if name == "response.output_item.done" and data["item"]["type"] == "function_call":
            item = data["item"]
            calls.append({"name": item["name"], "call_id": item["call_id"], "arguments": json.loads(item["arguments"])})
    return calls


def responses_text(raw: bytes, stream: bool) -> str:
    if not stream:
        return "".join(p["text"] for i in json.loads(raw)["output"] if i["type"] == "message" for p in i["content"])
    return "".join(d["delta"] for n, d in named_events(raw) if n == "response.output_text.delta")


def messages_calls(raw: bytes, stream: bool) -> list[dict[str, Any]]:
    if not stream:
        return [{"name": b["name"], "id": b["id"], "arguments": b["input"]}
                for b in json.loads(raw)["content"] if b["type"] == "tool_use"]
    blocks: dict[int, dict[str, Any]] = {}
    for name, data in named_events(raw):
        if name == "content_block_start" and data["content_block"]["type"] == "tool_use":
            blocks[data["index"]] = {"name": data["content_block"]["name"], "id": data["content_block"]["id"],
                                     "json": ""}
        elif name == "content_block_delta" and data["index"] in blocks:
            blocks[data["index"]]["json"] += data["delta"]["partial_json"]
    return [{"name": b["name"], "id": b["id"], "arguments": json.loads(b["json"])} for b in blocks.values()]


def messages_text(raw: bytes, stream: bool) -> str:
    if not stream:
        return "".join(b["text"] for b in json.loads(raw)["content"] if b["type"] == "text")
    return "".join(d["delta"]["text"] for n, d in named_events(raw)
                   if n == "content_block_delta" and d["delta"]["type"] == "text_delta")


def messages_stop_reason(raw: bytes, stream: bool) -> str:
    if not stream:
        return json.loads(raw)["stop_reason"]
    return [d for n, d in named_events(raw) if n == "message_delta"][-1]["delta"]["stop_reason"]


ROUTES: dict[str, tuple[str, Callable[..., dict[str, Any]], Callable[[bytes, bool], list[dict[str, Any]]],
                        Callable[[bytes, bool], str]]] = {
    "responses": ("/v1/responses", responses_body, responses_calls, responses_text),
    "messages": ("/v1/messages", messages_body, messages_calls, messages_text),
}
CASES = [(route, stream) for route in ROUTES for stream in (False, True)]


def refusal_line(*commands: str, reason: str = "pipe") -> str:
    """The line a turn delivered after refused shell commands ends with."""
    return "allowlist-proxy refused in this turn: " + "; ".join(f"`{c}` ({reason})" for c in commands) + "."


def ask(proxy, route: str, *, stream: bool, session: str = "ses_dialect", **extra: Any):
    path, body, _, _ = ROUTES[route]
    with proxy.client() as client:
        return client.post(path, json=body(stream=stream, **extra), headers={"x-session-id": session})


# ---------------------------------------------------------------- the scripted upstream speaks vLLM's dialects


def test_scripted_upstream_streams_responses_events_as_vllm(upstream):
    import httpx

    upstream.script(Reply(content="Let me look.", tool_calls=[("bash", {"command": ALLOWED})]))
    raw = httpx.post(upstream.url + "/responses", json=responses_body(stream=True)).content
    events = named_events(raw)
    fragments = -(-len(json.dumps({"command": ALLOWED})) // Reply().arguments_chunk)
    assert [n for n, _ in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.output_item.added", *["response.function_call_arguments.delta"] * fragments,
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert all(n == d["type"] for n, d in events)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    added = events[10][1]
    assert added["output_index"] == 1 and added["item"]["type"] == "function_call"
    assert added["item"]["name"] == "bash" and added["item"]["call_id"].startswith("call_")
    assert added["item"]["arguments"] == "" and added["item"]["status"] == "in_progress"
    done = events[-3][1]
    assert json.loads(done["arguments"]) == {"command": ALLOWED} and done["name"] == "bash"
    completed = events[-1][1]["response"]
    assert completed["status"] == "completed" and completed["object"] == "response"
    assert [i["type"] for i in completed["output"]] == ["message", "function_call"]
    assert completed["usage"]["input_tokens"] == 12 and "[DONE]" not in raw.decode()


def test_scripted_upstream_streams_messages_events_as_vllm(upstream):
    import httpx

    upstream.script(Reply(content="Let me look.", reasoning="hm", tool_calls=[("bash", {"command": ALLOWED})]))
    raw = httpx.post(upstream.url + "/messages", json=messages_body(stream=True)).content
    events = named_events(raw)
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert all(n == d["type"] for n, d in events)
    starts = [d for n, d in events if n == "content_block_start"]
    assert [s["content_block"]["type"] for s in starts] == ["thinking", "text", "tool_use"]
    assert [s["index"] for s in starts] == [0, 1, 2]
    tool = starts[2]["content_block"]
    assert tool["input"] == {} and tool["name"] == "bash" and tool["id"]
    deltas = [d["delta"] for n, d in events if n == "content_block_delta" and d["index"] == 2]
    assert {d["type"] for d in deltas} == {"input_json_delta"}
    assert json.loads("".join(d["partial_json"] for d in deltas)) == {"command": ALLOWED}
    assert events[-2][1]["delta"] == {"stop_reason": "tool_use"} and events[-2][1]["usage"]["input_tokens"] == 12
    # vLLM dumps message_start with exclude_unset: the message carries no type or role.
    assert "type" not in events[0][1]["message"] and events[0][1]["message"]["content"] == []


def test_scripted_upstream_answers_whole_dialect_bodies(upstream):
    import httpx

    upstream.script(Reply(content="ok", tool_calls=[("bash", {"command": ALLOWED})]),
                    Reply(content="ok", tool_calls=[("bash", {"command": ALLOWED})]))
    response = httpx.post(upstream.url + "/responses", json=responses_body()).json()
    assert [i["type"] for i in response["output"]] == ["message", "function_call"]
    assert response["output"][1]["id"].startswith("fc_") and response["status"] == "completed"
    message = httpx.post(upstream.url + "/messages", json=messages_body()).json()
    assert (message["type"], message["role"], message["stop_reason"]) == ("message", "assistant", "tool_use")
    assert message["content"][1] == {"type": "tool_use", "id": message["content"][1]["id"], "name": "bash",
                                     "input": {"command": ALLOWED}}
    refused = httpx.post(upstream.url + "/messages", json={**messages_body(), "model": "nope"})
    assert refused.status_code == 404 and refused.json()["type"] == "error"


# ---------------------------------------------------------------- enforcement on each route


@pytest.mark.parametrize(("route", "stream"), CASES)
def test_a_piped_command_never_reaches_the_client(upstream, proxy, route, stream):
    upstream.responder = looping()
    response = ask(proxy, route, stream=stream)
    assert response.status_code == 200
    _, _, calls, text = ROUTES[route]
    # Its text reaches the client only quoted in the line that says it was refused (the model said nothing else).
    note = text(response.content, stream)
    assert note.startswith("allowlist-proxy refused in this turn: `" + PIPED) and "\n" not in note
    rest = response.content.replace(json.dumps(note, ensure_ascii=False)[1:-1].encode(), b"")
    assert b"| head" not in rest and b"| tail" not in rest
    delivered = calls(response.content, stream)
    assert [(c["name"], c["arguments"]) for c in delivered] == [("bash", {"command": ALLOWED})]
    assert len(upstream.requests) == 4
    rows = proxy.rows("SELECT route, attempt, decision, shape, delivered FROM tool_calls ORDER BY attempt")
    assert [tuple(r) for r in rows] == [(route, 1, "reject", "pipe", 0), (route, 2, "reject", "pipe", 0),
                                        (route, 3, "reject", "pipe", 0), (route, 4, "allow", None, 1)]
    request = proxy.rows("SELECT route, attempts, budget_exhausted, session_id, stream FROM requests")[0]
    assert tuple(request) == (route, 4, 0, "ses_dialect", int(stream))


@SQLITE_ONLY
def test_an_allowed_first_attempt_arrives_as_vllm_sent_it(upstream, proxy):
    for route, stream in CASES:
        upstream.script(Reply(content="Searching.", reasoning="hm", tool_calls=[("bash", {"command": ALLOWED})]))
        response = ask(proxy, route, stream=stream)
        assert response.content == upstream.responses[-1], (route, stream)


@SQLITE_ONLY
def test_responses_stream_is_one_response_across_attempts(upstream, proxy):
    upstream.responder = bash_sequence([PIPED, ALLOWED], content="Searching. ")
    response = ask(proxy, "responses", stream=True)
    events = named_events(response.content)
    names = [n for n, _ in events]
    assert names.count("response.created") == 1 and names.count("response.completed") == 1
    assert names[-1] == "response.completed"
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    added = [d["output_index"] for n, d in events if n == "response.output_item.added"]
    assert added == list(range(len(added)))  # each attempt's text, then the call, each at the next position
    completed = events[-1][1]["response"]
    assert completed["id"] == events[0][1]["response"]["id"]
    # The retry's text is not sent again (the client has this turn's narration from the first attempt); the
    # refusal line is a message item of its own, before the call.
    assert [i["type"] for i in completed["output"]] == ["message", "message", "function_call"]
    assert completed["usage"]["input_tokens"] == 24  # both attempts
    assert responses_text(response.content, True) == "Searching. \n\n" + refusal_line(PIPED)


@SQLITE_ONLY
def test_messages_stream_is_one_message_across_attempts(upstream, proxy):
    upstream.responder = bash_sequence([PIPED, ALLOWED], content="Searching. ")
    response = ask(proxy, "messages", stream=True)
    events = named_events(response.content)
    names = [n for n, _ in events]
    assert names.count("message_start") == 1 and names[-2:] == ["message_delta", "message_stop"]
    starts = [d for n, d in events if n == "content_block_start"]
    assert [s["index"] for s in starts] == [0, 1, 2]
    assert [s["content_block"]["type"] for s in starts] == ["text", "text", "tool_use"]
    assert messages_text(response.content, True) == "Searching. \n\n" + refusal_line(PIPED)
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use" and events[-2][1]["usage"]["input_tokens"] == 24


def _assert_nested(events: list[tuple[str, Any]], key: str, start: str, stop: str,
                   inside: Callable[[str, Any], bool]) -> list[int]:
    """Parts numbered by `key` open at consecutive positions, each started and stopped once, every event that
    names a position inside its open part; the positions, in order."""
    starts = [d[key] for n, d in events if n == start]
    stops = [d[key] for n, d in events if n == stop]
    assert starts == list(range(len(starts))) and sorted(stops) == starts
    opened: set[int] = set()
    for name, data in events:
        if name == start:
            opened.add(data[key])
        elif inside(name, data):
            assert data[key] in opened, (name, data)
            if name == stop:
                opened.discard(data[key])
    return starts


def assert_valid_stream(route: str, raw: bytes) -> None:
    """The client's stream is one well-formed response of its dialect: Responses events numbered 0..n-1 and
    output items placed at consecutive positions, each added and done once; Messages blocks at consecutive
    indexes, each started and stopped once, every delta inside its block."""
    events = named_events(raw)
    assert all(name == data["type"] for name, data in events)
    if route == "responses":
        assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
        added = _assert_nested(events, "output_index", "response.output_item.added", "response.output_item.done",
                               inside=lambda name, data: "output_index" in data)
        assert [n for n, _ in events].count("response.completed") == 1 and events[-1][0] == "response.completed"
        assert len(events[-1][1]["response"]["output"]) == len(added)
        return
    _assert_nested(events, "index", "content_block_start", "content_block_stop",
                   inside=lambda name, data: name in ("content_block_delta", "content_block_stop"))
    names = [n for n, _ in events]
    assert names.count("message_start") == 1 and names[0] == "message_start"
    assert names.count("message_stop") == 1 and names[-2:] == ["message_delta", "message_stop"]


def _reasoning(raw: bytes, route: str) -> str:
    if route == "responses":
        return "".join(d["delta"] for n, d in named_events(raw) if n == "response.reasoning_text.delta")
    return "".join(d["delta"]["thinking"] for n, d in named_events(raw)
                   if n == "content_block_delta" and d["delta"]["type"] == "thinking_delta")


@SQLITE_ONLY
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_refused_retrys_text_never_reaches_the_client_on_dialect_streams(upstream, proxy, route):
    """The first attempt's text streams live; a refused retry's text and reasoning never reach the client, the
    delivered attempt's do (in items or blocks of their own), then the refusal line; the stream stays one valid
    response."""
    upstream.script(Reply(content="First try. ", reasoning="Thought 1. ", tool_calls=[("bash", {"command": PIPED})]),
                    Reply(content="Second try. ", reasoning="Thought 2. ",
                          tool_calls=[("bash", {"command": PIPED + " -n"})]),
                    Reply(content="Third try. ", reasoning="Thought 3. ", tool_calls=[("bash", {"command": ALLOWED})]))
    response = ask(proxy, route, stream=True)
    _, _, calls, text = ROUTES[route]
    assert text(response.content, True) == "First try. Third try. \n\n" + refusal_line(PIPED, PIPED + " -n")
    assert _reasoning(response.content, route) == "Thought 1. Thought 3. "
    assert b"Second try" not in response.content and b"Thought 2" not in response.content
    assert [c["arguments"] for c in calls(response.content, True)] == [{"command": ALLOWED}]
    assert_valid_stream(route, response.content)
    assert len(upstream.requests) == 3


@SQLITE_ONLY
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_blocked_dialect_turn_ends_with_the_explanation_alone(upstream, proxy, route):
    upstream.script(*[Reply(content=f"Try {n}. ", tool_calls=[("bash", {"command": PIPED})]) for n in range(1, 5)])
    response = ask(proxy, route, stream=True)
    _, _, calls, text = ROUTES[route]
    said = text(response.content, True)
    assert said.startswith("Try 1. allowlist-proxy blocked this turn")
    assert all(f"Try {n}" not in said for n in (2, 3, 4))
    assert calls(response.content, True) == []
    assert_valid_stream(route, response.content)
    request = proxy.rows("SELECT attempts, budget_exhausted FROM requests")[0]
    assert tuple(request) == (4, 1)


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [False, True])
def test_responses_model_is_told_why_with_function_call_output(upstream, proxy, stream):
    upstream.responder = switching()
    ask(proxy, "responses", stream=stream)
    assert len(upstream.requests) == 2
    retry = upstream.requests[1]["input"]
    call, output = retry[-2], retry[-1]
    assert call["type"] == "function_call" and json.loads(call["arguments"])["command"] == PIPED
    assert output == {"type": "function_call_output", "call_id": call["call_id"], "output": output["output"]}
    assert "pipe" in output["output"] and "search" in output["output"]
    assert retry[0] == upstream.requests[0]["input"][0]  # the client's own input is kept


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [False, True])
def test_messages_model_is_told_why_with_an_error_tool_result(upstream, proxy, stream):
    upstream.responder = switching()
    ask(proxy, "messages", stream=stream)
    assert len(upstream.requests) == 2
    assistant, user = upstream.requests[1]["messages"][-2:]
    tool_use = assistant["content"][-1]
    assert assistant["role"] == "assistant" and tool_use["type"] == "tool_use"
    assert tool_use["input"] == {"command": PIPED}  # an object, as Anthropic's input is
    assert user["role"] == "user" and len(user["content"]) == 1
    result = user["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == tool_use["id"] and result["is_error"] is True
    assert "pipe" in result["content"]


@SQLITE_ONLY
@pytest.mark.parametrize(("route", "stream"), CASES)
def test_budget_exhaustion_ends_with_an_explanation(upstream, proxy, route, stream):
    upstream.responder = bash_sequence(["curl -s https://example.com | head -5"] * 10)
    response = ask(proxy, route, stream=stream)
    _, _, calls, text = ROUTES[route]
    assert calls(response.content, stream) == []
    explanation = text(response.content, stream)
    assert "curl -s https://example.com | head -5" in explanation and "pipe" in explanation
    if route == "messages":
        assert messages_stop_reason(response.content, stream) == "end_turn"
    request = proxy.rows("SELECT attempts, budget_exhausted FROM requests")[0]
    assert tuple(request) == (4, 1)


@SQLITE_ONLY
@pytest.mark.parametrize("route", list(ROUTES))
def test_text_streams_before_the_tool_call_completes(upstream, proxy, route):
    upstream.script(Reply(content="Let me search for that. ", tool_calls=[("bash", {"command": ALLOWED})],
                          arguments_chunk=2, chunk_delay=0.01))
    path, body, _, _ = ROUTES[route]
    marker = "response.output_text.delta" if route == "responses" else "text_delta"
    with proxy.client() as client, client.stream("POST", path, json=body(stream=True)) as response:
        lines = response.iter_lines()
        for line in lines:
            if line.startswith("data: ") and marker in line:
                assert upstream.completed_streams == 0  # the upstream is still sending the call
                break
        rest = [line for line in lines if line]
    assert "bash" in "".join(rest)


def test_observe_mode_changes_no_byte_and_records_the_route(upstream, start_proxy):
    observer = start_proxy(upstream.url, policy=OBSERVE_POLICY)
    upstream.responder = looping()
    for route, stream in CASES:
        response = ask(observer, route, stream=stream)
        assert response.content == upstream.responses[-1], (route, stream)
    rows = observer.rows("SELECT route, decision, shape, delivered, mode FROM tool_calls ORDER BY created_at")
    assert [tuple(r) for r in rows] == [(route, "reject", "pipe", 1, "observe") for route, _ in CASES]


def test_unknown_tool_is_rejected_on_both_dialects(upstream, proxy):
    for route in ROUTES:
        upstream.script(Reply(tool_calls=[("shell", {"cmd": "ls"})]), Reply(content="ok, no tools"))
        response = ask(proxy, route, stream=False)
        assert ROUTES[route][3](response.content, False) == ("ok, no tools\n\nallowlist-proxy refused in this turn: "
                                                             '`shell {"cmd": "ls"}` (unknown_tool).')
    rows = proxy.rows("SELECT route, primary_reason FROM tool_calls ORDER BY created_at")
    assert [tuple(r) for r in rows] == [("responses", "unknown_tool"), ("messages", "unknown_tool")]


def test_a_later_request_continues_the_session_by_lineage(upstream, proxy):
    upstream.responder = switching()
    with proxy.client() as client:
        first = responses_body()
        reply = client.post("/v1/responses", json=first).json()
        follow = {**first, "input": first["input"] + reply["output"] + [
            {"type": "function_call_output", "call_id": reply["output"][-1]["call_id"], "output": "results"}]}
        upstream.responder = None
        client.post("/v1/responses", json=follow)
        upstream.responder = switching()
        first = messages_body("find tokio docs")  # another first message: another lineage
        reply = client.post("/v1/messages", json=first).json()
        follow = {**first, "messages": first["messages"] + [
            {"role": "assistant", "content": reply["content"]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": reply["content"][-1]["id"],
                                          "content": "results"}]}]}
        upstream.responder = None
        client.post("/v1/messages", json=follow)
    sessions = proxy.rows("SELECT route, session_id FROM requests ORDER BY started_at")
    assert [r["route"] for r in sessions] == ["responses", "responses", "messages", "messages"]
    assert sessions[0]["session_id"] == sessions[1]["session_id"] != sessions[2]["session_id"]
    assert sessions[2]["session_id"] == sessions[3]["session_id"]


@SQLITE_ONLY
def test_messages_errors_have_anthropics_shape(upstream, proxy):
    with proxy.client() as client:
        unknown = client.post("/v1/messages", json={**messages_body(), "model": "no-such-model"})
        invalid = client.post("/v1/messages", content=b"{not json")
        upstream.script(Reply(status=500, error_message="engine died"))
        failed = client.post("/v1/messages", json=messages_body())
    assert unknown.status_code == 404
    assert unknown.json()["type"] == "error" and unknown.json()["error"]["type"] == "not_found_error"
    assert "no-such-model" in unknown.json()["error"]["message"]
    assert invalid.status_code == 400 and invalid.json()["error"]["type"] == "invalid_request_error"
    assert failed.status_code == 500 and failed.json() == {
        "type": "error", "error": {"type": "BadRequestError", "message": "engine died"}}  # vLLM's, passed on
    upstream.script(Reply(tool_calls=[("bash", {"command": PIPED})]), Reply(status=500, error_message="died"))
    streamed = ask(proxy, "messages", stream=True)
    name, last = named_events(streamed.content)[-1]
    assert name == "error" and last["error"]["type"] == "api_error" and "died" in last["error"]["message"]
    assert b"| head" not in streamed.content


# ---------------------------------------------------------------- raw completions


def _xml(command: str, before: str = "I will search.\n") -> str:
    return (f"{before}<tool_call>\n<function=bash>\n<parameter=command>\n{command}\n</parameter>\n</function>\n"
            "</tool_call>")


def _completion(stream: bool, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": "<|im_start|>user\nsearch<|im_end|>\n", "max_tokens": 64, "stream": stream,
            **extra}


@pytest.mark.parametrize("stream", [False, True])
def test_completion_with_a_rejected_call_becomes_an_error_naming_the_reasons(upstream, proxy, stream):
    upstream.script(Reply(content=_xml(PIPED), content_chunk=5))
    with proxy.client() as client:
        response = client.post("/v1/completions", json=_completion(stream), headers={"x-session-id": "ses_raw"})
    # The call never arrives in a form a client would run; the error quotes it only to say why.
    assert b"<tool_call>" not in response.content and b"<function=" not in response.content
    if stream:
        assert response.status_code == 200 and response.content.endswith(b"data: [DONE]\n\n")
        error = sse_json(response.content)[-1]["error"]
    else:
        assert response.status_code == 403
        error = response.json()["error"]
    assert error["type"] == "permission_error" and error["code"] == "tool_call_rejected"
    assert f"`{PIPED}` (pipe)" in error["message"] and "Rejected (pipe" in error["message"]
    rows = proxy.rows("SELECT route, source, decision, primary_reason, delivered, session_id FROM tool_calls")
    assert [tuple(r) for r in rows] == [("completions", "qwen3_coder", "reject", "pipe", 0, "ses_raw")]


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [False, True])
def test_completion_with_an_allowed_call_arrives_verbatim(upstream, proxy, stream):
    text = _xml(ALLOWED) + "\nDone."
    upstream.script(Reply(content=text, content_chunk=3))
    with proxy.client() as client:
        response = client.post("/v1/completions", json=_completion(stream))
    if stream:
        chunks = sse_json(response.content)
        assert "".join(c["choices"][0]["text"] for c in chunks if c.get("choices")) == text
        assert all(c.get("choices") for c in chunks)  # the usage chunk the proxy asked for stays with it
    else:
        assert response.content == upstream.responses[-1]
    rows = proxy.rows("SELECT route, decision, delivered FROM tool_calls")
    assert [tuple(r) for r in rows] == [("completions", "allow", 1)]
    assert proxy.rows("SELECT prompt_tokens FROM requests")[0][0] == 12


def test_completion_in_observe_mode_passes_untouched_and_is_recorded(upstream, start_proxy):
    observer = start_proxy(upstream.url, policy=OBSERVE_POLICY)
    for stream in (False, True):
        upstream.script(Reply(content=_xml(PIPED)))
        body = _completion(stream, **({"stream_options": {"include_usage": True}} if stream else {}))
        with observer.client() as client:
            response = client.post("/v1/completions", json=body)
        assert response.content == upstream.responses[-1]
    rows = observer.rows("SELECT route, decision, shape, delivered, mode FROM tool_calls")
    assert [tuple(r) for r in rows] == [("completions", "reject", "pipe", 1, "observe")] * 2


# ---------------------------------------------------------------- routes that are not judged


@SQLITE_ONLY
def test_an_unlisted_route_is_refused_naming_passthrough_routes(upstream, proxy):
    with proxy.client() as client:
        for method, path in [("POST", "/v1/fine_tuning/jobs"), ("GET", "/v1/files"), ("GET", "/v1/responses/resp_1"),
                             ("GET", "/v1/batches"), ("POST", "/v1/policies")]:
            response = client.request(method, path, json={"model": MODEL} if method == "POST" else None)
            assert response.status_code == 403, path
            error = response.json()["error"]
            assert error["type"] == "permission_error" and error["code"] == "route_not_allowed"
            assert "passthrough_routes" in error["message"] and path in error["message"]
        # A listed prefix cannot carry a path past the list: the upstream client would resolve the `..`.
        for path in ("/v1/models/%2e%2e/files", "/v1/models/%2E%2E/fine_tuning/jobs", "/v1/tokenize/%2e/x"):
            response = client.get(path)
            assert response.status_code == 403 and response.json()["error"]["code"] == "route_not_allowed", path
        # On Anthropic's routes, in Anthropic's shape.
        response = client.post("/v1/messages/count_tokens", json=messages_body())
    assert response.status_code == 403 and response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "permission_error"
    assert "passthrough_routes" in response.json()["error"]["message"]
    assert upstream.requests == []


@SQLITE_ONLY
def test_listed_routes_are_forwarded_and_the_list_comes_from_the_policy(upstream, start_proxy, tmp_path):
    policy = tmp_path / "routes.yaml"
    text = (ROOT / "policies" / "strict.yaml").read_text()
    start = text.index("passthrough_routes:")
    end = text.index("\n", start)
    policy.write_text(text[:start] + "passthrough_routes: [/v1/tokenize, /v1/files]" + text[end:])
    custom = start_proxy(upstream.url, policy=policy)
    with custom.client() as client:
        tokenized = client.post("/v1/tokenize", json={"model": MODEL, "prompt": "a b c"})
        files = client.get("/v1/files")  # forwarded: the scripted upstream has no such route
        models = client.get("/v1/models")  # no longer listed
        files_below = client.get("/v1/files/file-1/content")
    assert tokenized.status_code == 200 and tokenized.json()["count"] == 3
    assert files.status_code == 404 and files_below.status_code == 404
    assert models.status_code == 403 and "passthrough_routes" in models.json()["error"]["message"]


@SQLITE_ONLY
def test_default_routes_pass_and_the_proxys_own_endpoints_are_never_forwarded(upstream, proxy):
    with proxy.client() as client:
        assert client.get("/v1/models").json()["data"][0]["id"] == MODEL
        assert client.post("/v1/tokenize", json={"model": MODEL, "prompt": "a b"}).json()["count"] == 2
        health = client.get("/health")
        policies = client.get("/policies")
        metrics = client.get("/metrics")
        stats = client.get("/v1/stats/models")
    assert health.json()["status"] == "ok" and policies.status_code == 200
    assert metrics.status_code == 200 and b"allowlist_proxy_requests" in metrics.content
    assert stats.status_code == 403  # never the upstream's, whatever its name
    # The scripted upstream has neither /policies nor /metrics, and its /health answers an empty body.
    assert upstream.requests == []


# ---------------------------------------------------------------- one loop, whichever the route


def _loops(rows: list[Any], min_attempts: int = 3) -> int:
    """Runs of >= min_attempts consecutive rejected calls of one session with the same shape (DESIGN.md)."""
    loops, shape, run = 0, None, 0
    for row in rows:
        if row["decision"] == "allow":
            shape, run = None, 0
            continue
        run = run + 1 if row["shape"] == shape else 1
        shape = row["shape"]
        if run == min_attempts:
            loops += 1
    return loops


def test_the_same_looping_session_gives_the_same_loop_count_on_every_route(upstream, proxy):
    upstream.responder = looping()
    with proxy.client() as client:
        for route, path, body in [("chat", "/v1/chat/completions", chat([{"role": "user", "content": "find"}],
                                                                        tools=OPENCODE_TOOLS)),
                                  ("responses", "/v1/responses", responses_body("find")),
                                  ("messages", "/v1/messages", messages_body("find"))]:
            for stream in (False, True):
                response = client.post(path, json={**body, "stream": stream},
                                       headers={"x-session-id": f"ses_loop_{route}"})
                assert response.status_code == 200
    counts = {}
    for route in ("chat", "responses", "messages"):
        rows = proxy.rows("SELECT decision, shape FROM tool_calls WHERE session_id = :session "
                          "ORDER BY created_at, attempt, call_index", session=f"ses_loop_{route}")
        assert len(rows) == 8
        counts[route] = _loops(rows)
    assert counts == {"chat": 2, "responses": 2, "messages": 2}
    # The statistics agree, split by route.
    proxy.flush()
    stats = {route: asyncio.run_coroutine_threadsafe(model_stats(proxy.services.engine, route=route),
                                                     proxy.app.state.loop).result(15)["models"][0]["loops"]["count"]
             for route in counts}
    assert stats == counts
    by_route = proxy.rows("SELECT route, count(*) FROM tool_calls GROUP BY route ORDER BY route")
    assert [tuple(r) for r in by_route] == [("chat", 8), ("messages", 8), ("responses", 8)]
