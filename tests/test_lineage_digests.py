"""Lineage keys hashed once per request, and the shared store asked once for a key it lacks (issue 27: the
request path of a client that names no session)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.sessions.resolve import (
    SessionResolver,
    _arguments,
    _canonical,
    _text,
    conversation_digests,
    hash_conversation,
    reply_digest,
)

CALL = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
REPLY = {"role": "assistant", "content": "done", "tool_calls": []}

CONVERSATIONS: list[list[Any]] = [
    [],
    [{"role": "system", "content": "be brief"}],
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "s"}, {"role": "user", "content": "list"},
     {"role": "assistant", "content": None, "tool_calls": [CALL]},
     {"role": "tool", "tool_call_id": "call_1", "content": "a b"},
     {"role": "developer", "content": "plan mode"}, {"role": "user", "content": [{"type": "text", "text": "go"}]}],
    ["not a message", {"role": "user", "content": {"odd": ["shape"]}}, None],
]
REPLIES: list[Any] = [REPLY, {"role": "system", "content": "x"},
                      {"role": "assistant", "content": "", "tool_calls": [CALL]}]


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("reply", REPLIES)
def test_the_reply_digest_extends_the_requests_hash_to_the_same_key(messages, reply):
    expected = conversation_digests([*messages, reply])
    want = expected[-1] if expected else None
    known = hash_conversation(messages)
    assert reply_digest(messages, reply, known) == want
    assert reply_digest(messages, reply, None) == want
    # the Responses and Messages relays remember the conversation plus the reply's earlier items
    more = [*messages, {"role": "assistant", "content": "first item"}]
    longer = conversation_digests([*more, reply])
    assert reply_digest(more, reply, known) == (longer[-1] if longer else None)
    # a list that is not the hashed conversation (equal content, other objects) is hashed afresh, alike
    assert reply_digest([dict(m) if isinstance(m, dict) else m for m in messages], reply, known) == want
    # the relays keep no parsed conversation while they stream: None stands for the one `known` hashed
    assert reply_digest(None, reply, known) == want
    assert reply_digest(None, reply, known, [{"role": "assistant", "content": "first item"}]) == (
        longer[-1] if longer else None)
    assert reply_digest(None, reply, None) is None


def test_only_prefixes_ending_in_a_turn_the_proxy_could_deliver_are_keys():
    messages = CONVERSATIONS[3]
    every = conversation_digests(messages)  # user, assistant, tool, user (instructions skipped)
    assert hash_conversation(messages).keys == [every[1]]


@pytest.mark.each_database
async def test_the_store_is_asked_once_for_a_key_it_lacks(engine: AsyncEngine):
    asked: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "session_lineage" in statement:
            asked.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", count)
    resolver = SessionResolver(engine=engine)
    conversation = CONVERSATIONS[3]
    first = await resolver.aresolve({}, conversation)
    again = await resolver.aresolve({}, conversation)
    assert len(asked) == 1 and first.is_new and again.is_new and first.id != again.id
    # a turn this process delivered is found in memory: no query either (remembered from the resolved hash)
    resolver.remember(first, None, REPLY)
    follow = [*conversation, REPLY, {"role": "user", "content": "next"}]
    assert (await resolver.aresolve({}, follow)).id == first.id
    assert len(asked) == 1


@pytest.mark.each_database
async def test_a_request_waits_for_the_store_holding_its_keys_not_its_conversation(engine: AsyncEngine):
    resolver = SessionResolver(engine=engine)
    conversation = CONVERSATIONS[3]
    pending = resolver.prepare({}, conversation)
    held = [pending.digests.keys, pending.keys]  # strings and a hash: no message object
    assert all(isinstance(key, str) for keys in held for key in keys)
    first = await resolver.finish(pending)
    resolver.remember(first, None, REPLY)
    follow = [*conversation, REPLY, {"role": "user", "content": "next"}]
    assert (await resolver.finish(resolver.prepare({}, follow))).id == first.id
    named = resolver.prepare({"x-session-id": "ses_1"}, conversation)
    assert (await resolver.finish(named)).id == "ses_1"


_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(["", "\u2028", "\"\\\n\t", "é"])
_CALL = st.fixed_dictionaries({"id": _TEXT, "type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": _TEXT, "arguments": _TEXT | st.just('{"b": 1, "a": [2, "x"]}')})})
_MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool", "system"]) | _TEXT},
                                 optional={"content": _TEXT | st.lists(st.fixed_dictionaries(
                                               {"type": st.just("text"), "text": _TEXT}), max_size=3) | st.none(),
                                           "tool_calls": st.lists(_CALL, max_size=2),
                                           "tool_call_id": _TEXT | st.none()})


@settings(max_examples=400, deadline=None)
@given(_MESSAGE)
def test_a_messages_canonical_bytes_are_the_stored_ones(message):
    """Stored digests outlive a release: the fast encoding of a message is json.dumps's, byte for byte."""
    calls = [[c.get("id"), c["function"].get("name"), _arguments(c["function"].get("arguments"))]
             for c in message.get("tool_calls") or []]
    key = [message.get("role"), _text(message.get("content")), calls, message.get("tool_call_id")]
    assert _canonical(message) == json.dumps(key, sort_keys=True, ensure_ascii=False, default=str).encode()


_LONG = st.text(alphabet=st.characters(codec="utf-8"), min_size=256, max_size=400)
_KEPT_MESSAGE = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant", "tool"]),
    "content": _LONG | _TEXT | st.sampled_from(["x" * 300, " x" * 150]) | st.none(),
}, optional={"tool_call_id": st.sampled_from(["None", "call_1", ""]) | st.none(),
             "tool_calls": st.lists(_CALL, max_size=2) | st.just([{"id": "c", "function": {"name": "n", "arguments": {
                 "a": 1}}}, "not a call"])})


@settings(max_examples=200, deadline=None)
@given(st.lists(_KEPT_MESSAGE, min_size=1, max_size=6))
def test_kept_message_digests_are_the_digests_hashed_afresh(messages):
    """A turn's digest is kept between requests (one with calls, or a long text): what is kept is what hashing it
    again gives, whatever else was hashed before (the same text under another role, answering another call, or
    with other calls, is another turn)."""
    import hashlib

    from proxy.sessions import resolve

    def fresh() -> list[str]:
        running, out = hashlib.sha256(), []
        for message in messages:
            running.update(hashlib.sha256(_canonical(message)).digest())
            out.append(running.copy().hexdigest()[:32])
        return out

    assert conversation_digests(messages) == fresh()
    assert conversation_digests(messages) == fresh()  # now read from what was kept
    twin = [{**m, "tool_call_id": None if m.get("tool_call_id") == "None" else "None"} for m in messages]
    assert conversation_digests(twin) != conversation_digests(messages)
    recalled = [{**m, "tool_calls": [{"id": "other", "function": {"name": "n", "arguments": "{}"}}]}
                for m in messages]
    assert conversation_digests(recalled) != conversation_digests(messages)
    resolve._KEPT.clear()
    assert conversation_digests(messages) == fresh()
