"""A request that demands a tool call (`tool_choice` required, a named tool, Messages `any`/`tool`) and whose
retry budget is spent ends in an error whose message explains the block, on every judged route, whole and
streamed, in the shape that route's SDK raises: the client's user learns why instead of a text turn the
client reads as a broken one (smolagents)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from proxy.enforce.tool_choice import demands_call
from proxy.testing.characters import OPENCODE_TOOLS, bash_sequence
from tests.conftest import MODEL, chat, sse_json
from tests.test_dialects import ROUTES, named_events

SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])
PIPED = "curl -s https://example.com | head -5"
CHAT_DEMANDS = ["required", {"type": "function", "function": {"name": "bash"}}]
DEMANDS = {
    "chat": CHAT_DEMANDS,
    "responses": ["required", {"type": "function", "name": "bash"},
                  {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "bash"}]}],
    "messages": [{"type": "any"}, {"type": "tool", "name": "bash"}],
}
CASES = [(route, choice, stream)
         for route, choices in DEMANDS.items() for choice in choices for stream in (False, True)]


@pytest.mark.parametrize("choice", ["auto", "none", None, {"type": "auto"}, {"type": "none"}, {"type": "allowed_tools",
                                    "mode": "auto"}, 7, ["required"]])
def test_what_does_not_demand_a_call(choice):
    assert not demands_call({} if choice is None else {"tool_choice": choice})


def _post(proxy, route: str, choice: Any, stream: bool):
    with proxy.client() as client:
        if route == "chat":
            body = chat([{"role": "user", "content": "fetch it"}], tools=OPENCODE_TOOLS, tool_choice=choice,
                        stream=stream)
            return client.post("/v1/chat/completions", json=body, headers={"x-session-id": "ses_tc"})
        path, make, _, _ = ROUTES[route]
        return client.post(path, json=make(stream=stream, tool_choice=choice), headers={"x-session-id": "ses_tc"})


def _streamed_error(route: str, raw: bytes) -> str:
    if route == "chat":
        errors = [e["error"] for e in sse_json(raw) if "error" in e]
        assert len(errors) == 1 and errors[0]["code"] == "tool_call_blocked"
        assert raw.endswith(b"data: [DONE]\n\n")
        return errors[0]["message"]
    events = named_events(raw)
    if route == "messages":
        assert events[-1][0] == "error" and events[-1][1]["error"]["type"] == "invalid_request_error"
        return events[-1][1]["error"]["message"]
    (name, error), (last, failed) = events[-2:]
    assert name == "error" and error["code"] == "tool_call_blocked"
    assert last == "response.failed" and failed["response"]["status"] == "failed"
    assert failed["response"]["error"]["message"] == error["message"]
    return error["message"]


@SQLITE_ONLY
@pytest.mark.parametrize(("route", "choice", "stream"), CASES)
def test_a_blocked_turn_that_had_to_call_a_tool_ends_in_an_explaining_error(upstream, proxy, route, choice, stream):
    upstream.responder = bash_sequence([PIPED] * 10)
    response = _post(proxy, route, choice, stream)
    if stream:
        assert response.status_code == 200  # the stream had begun: the error is its last event
        message = _streamed_error(route, response.content)
    else:
        assert response.status_code == 422
        body = response.json()
        error = body["error"]
        if route == "messages":
            assert body["type"] == "error" and error["type"] == "invalid_request_error"
        else:
            assert error["type"] == error["code"] == "tool_call_blocked"
        message = error["message"]
    assert "allowlist-proxy blocked this turn" in message and PIPED in message and "pipe" in message
    request = proxy.rows("SELECT attempts, budget_exhausted, outcome FROM requests")[0]
    assert tuple(request) == (4, 1, "blocked")


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_sdk_raises_the_explanation(upstream, proxy, stream):
    upstream.responder = bash_sequence([PIPED] * 10)
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.APIError) as raised:
        answer = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "fetch"}],
                                                tools=json.loads(json.dumps(OPENCODE_TOOLS)), tool_choice="required",
                                                stream=stream)
        if stream:
            for _ in answer:
                pass
    assert "allowlist-proxy blocked this turn" in raised.value.message and PIPED in raised.value.message
    assert len(upstream.requests) == 4  # raised once, not retried by the SDK


@SQLITE_ONLY
def test_a_request_that_demands_a_call_still_gets_an_allowed_one(upstream, proxy):
    upstream.responder = bash_sequence([PIPED, 'uv run scripts/search.py "rust async"'])
    response = _post(proxy, "chat", "required", False)
    assert response.status_code == 200
    calls = response.json()["choices"][0]["message"]["tool_calls"]
    commands = [json.loads(c["function"]["arguments"])["command"] for c in calls]
    assert commands == ['uv run scripts/search.py "rust async"']
