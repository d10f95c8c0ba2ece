"""The body sent upstream keeps the client's bytes for every message the client sent: a retry splices the
proxy's turns in before the conversation's closing bracket instead of re-serialising the whole body."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.enforce.body_splice import splice_body
from proxy.testing.characters import OPENCODE_TOOLS, switching
from tests.conftest import MODEL
from tests.test_dialects import MESSAGES_TOOLS, RESPONSES_TOOLS

SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])

# A client's own spelling: no spaces, escaped non-ASCII and slashes, a raw newline between members, a
# history of several turns. Re-encoding any of it would change its bytes though not its meaning.
_HISTORY = ('{"role":"user","content":"caf\\u00e9 \\/tmp\\/x \\ud83d\\ude00 find rust async docs"},'
            '{"role":"assistant","content":"Looking.\\n"},\n  {"role":"user","content":"go on"}')
_RESPONSES_HISTORY = ('{"type":"message","role":"user","content":"caf\\u00e9 \\/tmp find rust async docs"},'
                      '\n {"type":"message","role":"user","content":"go on"}')


def _client_body(route: str, stream: bool) -> tuple[bytes, str]:
    """The raw body and the name of its conversation member."""
    dump = json.dumps
    if route == "chat":
        key, history, rest = "messages", _HISTORY, f'"tools":{dump(OPENCODE_TOOLS)}'
    elif route == "responses":
        key, history, rest = "input", _RESPONSES_HISTORY, f'"tools":{dump(RESPONSES_TOOLS)}'
    else:
        key, history, rest = "messages", _HISTORY, f'"max_tokens":1024,"tools":{dump(MESSAGES_TOOLS)}'
    text = f'{{"model":"{MODEL}","{key}":[{history}],\n{rest},"stream":{dump(stream)}}}'
    return text.encode(), key


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", ["chat", "responses", "messages"])
def test_a_retry_resends_the_clients_messages_byte_for_byte(upstream, proxy, route, stream):
    upstream.responder = switching()
    body, key = _client_body(route, stream)
    path = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}[route]
    with proxy.client() as client:
        response = client.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert len(upstream.raw_requests) == 2
    close = body.index(b"]", body.index(b"go on"))  # the conversation's closing bracket
    for sent in upstream.raw_requests:  # the first attempt and the retry alike
        assert sent[:close] == body[:close]
    retry = json.loads(upstream.raw_requests[1])
    client = json.loads(body)
    assert retry[key][:len(client[key])] == client[key]
    assert len(retry[key]) > len(client[key])  # the proxy's turns follow the client's
    assert retry["tools"] == client["tools"]


def test_only_what_the_proxy_changed_is_re_encoded():
    body = b'{"model":"alias","messages":[{"role":"user","content":"\\u00e9"}] ,"stream":1}'
    payload: dict[str, Any] = json.loads(body)
    payload.update(model="real", stream=True, stream_options={"include_usage": True})
    extra = [{"role": "tool", "content": "no"}]
    out = splice_body(body, payload, "messages", list(payload["messages"]), extra)
    assert out == (b'{"model":"real","messages":[{"role":"user","content":"\\u00e9"}, '
                   b'{"role": "tool", "content": "no"}] ,"stream":true, "stream_options": {"include_usage": true}}')
    assert json.loads(out) == {**payload, "messages": payload["messages"] + extra}


@pytest.mark.parametrize("body", [b'{"a":1,"a":2}', b'\xff{"a":1}', b'[1]', b'{"a":1} x'])
def test_a_body_that_cannot_be_edited_in_place_is_left_to_a_full_encode(body):
    assert splice_body(body, {"a": 2}) is None


def test_a_bare_string_conversation_becomes_a_list():
    body = b'{"input":"hi","model":"m"}'
    history = [{"type": "message", "role": "user", "content": "hi"}]
    out = splice_body(body, json.loads(body), "input", history, [{"type": "x"}])
    assert out is not None and json.loads(out) == {"input": [*history, {"type": "x"}], "model": "m"}
