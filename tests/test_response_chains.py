"""`previous_response_id` against a server that stores responses (vLLM with VLLM_ENABLE_RESPONSES_API_STORE=1):
the id the client was given must continue, upstream, from the turn the client got. A streamed turn that was
retried gave the client the first attempt's id; a blocked turn gave it the proxy's explanation in place of the
calls the server holds (proxy/sessions/response_chains.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.sessions.response_chains import ResponseChains
from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from tests.conftest import RunningProxy
from tests.test_dialects import ALLOWED, PIPED, named_events, responses_body

SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])


def _bash(command: str) -> Reply:
    return Reply(content="", tool_calls=[("bash", {"command": command, "description": "search"})])


def _send(proxy: RunningProxy, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The response id the client was given and the output items it got."""
    with proxy.client() as client:
        response = client.post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    if not body.get("stream"):
        whole = response.json()
        return whole["id"], whole["output"]
    events = named_events(response.content)
    created = next(data for name, data in events if name == "response.created")
    completed = next(data for name, data in events if name == "response.completed")
    return created["response"]["id"], completed["response"]["output"]


def _rendered(upstream: ScriptedUpstream) -> list[list[dict[str, Any]]]:
    """The conversation the model read at each upstream request (the store's history included)."""
    seen: list[list[dict[str, Any]]] = []

    def respond(body: dict[str, Any]) -> Reply:
        seen.append(body["messages"])
        return Reply(content="Done.")

    upstream.responder = respond
    return seen


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [True, False])
def test_a_retried_turn_continues_from_the_attempt_the_client_got(upstream: ScriptedUpstream, proxy: RunningProxy,
                                                                  stream: bool) -> None:
    upstream.store_responses = True
    upstream.script(_bash(PIPED), _bash(ALLOWED))
    client_id, output = _send(proxy, responses_body(stream=stream))
    (call,) = [item for item in output if item["type"] == "function_call"]
    assert json.loads(call["arguments"])["command"] == ALLOWED
    seen = _rendered(upstream)
    follow = responses_body(stream=stream, previous_response_id=client_id,
                            input=[{"type": "function_call_output", "call_id": call["call_id"], "output": "results"}])
    _send(proxy, follow)
    (model_read,) = seen
    calls = [c["function"]["arguments"] for m in model_read for c in m.get("tool_calls") or []]
    answers = [m["content"] for m in model_read if m["role"] == "tool"]
    assert len(calls) == 2 and PIPED in json.loads(calls[0])["command"] and json.loads(calls[1])["command"] == ALLOWED
    assert answers[0].startswith("Rejected (pipe)") and answers[1] == "results", answers
    sent = upstream.requests[-1]["previous_response_id"]
    assert (sent == client_id) == (not stream), "only a streamed retry gave the client another attempt's id"


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [True, False])
def test_a_blocked_turn_continues_from_the_explanation_the_client_got(upstream: ScriptedUpstream,
                                                                      proxy: RunningProxy, stream: bool) -> None:
    upstream.store_responses = True
    upstream.script(*[_bash(PIPED)] * 4)  # the first attempt and the retry budget's three
    client_id, output = _send(proxy, responses_body(stream=stream))
    (message,) = output
    explanation = message["content"][0]["text"]
    assert "allowlist-proxy blocked this turn" in explanation
    seen = _rendered(upstream)
    _send(proxy, responses_body(stream=stream, previous_response_id=client_id, input="Why?"))
    (model_read,) = seen
    tail = model_read[-4:]
    refused = [json.loads(c["function"]["arguments"])["command"] for c in tail[0]["tool_calls"]]
    assert refused == [PIPED], "the server's last attempt: the refused call"
    assert tail[1] == {"role": "tool", "tool_call_id": tail[0]["tool_calls"][0]["id"], "content": explanation}
    assert tail[2] == {"role": "assistant", "content": explanation} and tail[3] == {"role": "user", "content": "Why?"}


@SQLITE_ONLY
def test_a_turn_delivered_at_once_goes_up_as_the_client_sent_it(upstream: ScriptedUpstream,
                                                                proxy: RunningProxy) -> None:
    upstream.store_responses = True
    upstream.script(_bash(ALLOWED))
    client_id, output = _send(proxy, responses_body(stream=True))
    follow = responses_body(stream=True, previous_response_id=client_id,
                            input=[{"type": "function_call_output", "call_id": output[0]["call_id"], "output": "r"}])
    _rendered(upstream)
    _send(proxy, follow)
    assert upstream.requests[-1] == follow
    assert len(proxy.services.response_chains) == 0


def test_the_chains_forget_the_oldest_past_their_limit() -> None:
    chains = ResponseChains(limit=2)
    for n in range(3):
        chains.remember(f"client{n}", f"upstream{n}", [])
    chains.remember("same", "same", [])  # nothing to change: not kept
    assert [chains.get(f"client{n}") is not None for n in range(3)] == [False, True, True]
    assert chains.get("same") is None and chains.get(None) is None and len(chains) == 2
