"""The lineage digests and keys as the session resolver computes them now, against a verbatim copy of what it
computed before it was made cheaper (issue 27, session 9): stored digests and sessions depend on them, so every
public function must return what it returned, for every input (hostile shapes, huge texts and deep nesting
included), with its caches warm or cold.

Below, up to the tests: the functions of proxy/sessions/resolve.py as they were, unchanged (the reference)."""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxy.record import Digests
from proxy.sessions import resolve

_SHARED_LOOKBACK = 64
_MAX_ID = 128
_MIN_ID = 12


def call_digest(call_id: str) -> str:
    """The lineage key of a call id the proxy delivered (a request naming it again continues its session)."""
    return "c" + hashlib.sha256(call_id.encode()).hexdigest()[:31]


def _distinctive(call_id: Any) -> bool:
    """An id unique enough to name one delivered call: long, with both letters and digits."""
    return (isinstance(call_id, str) and _MIN_ID <= len(call_id) <= _MAX_ID and any(c.isdigit() for c in call_id)
            and any(c.isalpha() for c in call_id))


def _named_ids(message: Mapping[str, Any]) -> list[str]:
    """The call ids one message names, in order: its calls' ids and the call it answers. (Issue 37 changed this one
    on purpose: ids written in an assistant turn's text are no longer read; a model writes that text.)"""
    found: list[Any] = []  # unvalidated: filtered below
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            found.append(call.get("id"))
    found.append(message.get("tool_call_id"))
    return [i for i in found if _distinctive(i)]


def _latest_turns(messages: Sequence[Mapping[str, Any]], lookback: int) -> Sequence[Mapping[str, Any]]:
    latest: list[Mapping[str, Any]] = []
    for message in reversed(messages):
        if len(latest) >= lookback:
            break
        if isinstance(message, dict) and message.get("role") not in _INSTRUCTION_ROLES:
            latest.append(message)
    latest.reverse()
    return latest


def named_call_keys(messages: Sequence[Mapping[str, Any]], lookback: int = _SHARED_LOOKBACK) -> list[str]:
    """The lineage keys of the call ids the latest `lookback` turns name, the latest last (the strongest)."""
    return _keys_of_ids([_named_ids(message) for message in _latest_turns(messages, lookback)])


def _named_ids_by_turn(messages: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    return [_named_ids(message) for message in _latest_turns(messages, _SHARED_LOOKBACK)]


def _keys_of_ids(ids_by_turn: Sequence[Sequence[str]]) -> list[str]:
    keys = [call_digest(i) for ids in ids_by_turn for i in ids]
    return list(dict.fromkeys(reversed(keys)))[::-1]  # each once, at its latest place


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        parts = [str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content]
        return "".join(parts).strip()
    return json.dumps(content, sort_keys=True)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            return raw.strip()
    return raw


def _canonical(message: Mapping[str, Any]) -> bytes:
    # Clients resend earlier turns with small differences (content null vs "", reasoning dropped,
    # arguments re-serialized), so only what identifies the turn is hashed: its role, text, calls with their
    # ids (each delivered call's id is the upstream's, unique per turn, and sent back by every client) and
    # the call a tool message answers. Histories are the client's: any field may have any shape, and none
    # may break the digest.
    raw_calls = message.get("tool_calls")
    calls = []
    for call in raw_calls if isinstance(raw_calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            calls.append([call.get("id"), function.get("name"), _arguments(function.get("arguments"))])
    try:
        role, text, answers = message.get("role"), _text(message.get("content")), message.get("tool_call_id")
        if isinstance(role, str) and (answers is None or isinstance(answers, str)):
            return _canonical_plain(role, text, calls, answers)
        key = [role, text, calls, answers]
        return json.dumps(key, sort_keys=True, ensure_ascii=False, default=str).encode()
    except (RecursionError, TypeError, ValueError):  # nested past what json walks: identified by its role only
        return json.dumps([str(message.get("role")), "unreadable"]).encode()


def _canonical_plain(role: str, text: str, calls: list[Any], answers: str | None) -> bytes:
    """`json.dumps([role, text, calls, answers], sort_keys=True, ensure_ascii=False, default=str)`, byte for byte
    (stored digests depend on it), without building an encoder per message: most of a long conversation's
    digest time was that per-message setup."""
    encoded = _CALLS_NONE if not calls else _DUMPS(calls)
    tail = "null" if answers is None else _ESCAPE(answers)
    return f"[{_ESCAPE(role)}, {_ESCAPE(text)}, {encoded}, {tail}]".encode()


def _message_digest(message: Mapping[str, Any]) -> bytes:
    """sha256 of `_canonical(message)`. A turn comes back in every later request of its conversation: its digest is
    kept, keyed by what decides it (`_kept_key`), so that each request hashes only the turns new to it."""
    key = _kept_key(message)
    if key is None:
        return hashlib.sha256(_canonical(message)).digest()
    digest = _KEPT.get(key)
    if digest is None:
        digest = hashlib.sha256(_canonical(message)).digest()
        if len(_KEPT) >= _KEPT_MAX:
            del _KEPT[next(iter(_KEPT))]  # the oldest: a conversation's turns are asked for again in order
        _KEPT[key] = digest
    return digest


def _kept_key(message: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What decides a message's digest, as Python's hashes (keyed per process, so that no text can be made to
    collide with another) of its role, the call it answers, its text (with its length) and each call's id, name
    and arguments: no text is held. None for any shape but plain strings (hashed afresh)."""
    role, content, answers = message.get("role"), message.get("content"), message.get("tool_call_id")
    if type(role) is not str or not (answers is None or type(answers) is str):
        return None
    if content is None:
        text: tuple[int, int] | None = None
    elif type(content) is str:
        text = (len(content), hash(content))
    else:
        return None
    raw_calls = message.get("tool_calls")
    if not raw_calls:
        return (hash(role), hash(answers), text)
    if type(raw_calls) is not list:
        return None
    calls: list[Any] = [hash(role), hash(answers), text]
    for call in raw_calls:
        function = call.get("function") if type(call) is dict else None
        if type(function) is not dict:
            return None
        call_id, name, arguments = call.get("id"), function.get("name"), function.get("arguments")
        if (not (call_id is None or type(call_id) is str) or not (name is None or type(name) is str)
                or type(arguments) is not str):
            return None
        calls += (hash(call_id), hash(name), len(arguments), hash(arguments))
    return tuple(calls)


# ~250 bytes an entry, 4 MB in all.
_KEPT_MAX = 16384
_KEPT: dict[tuple[Any, ...], bytes] = {}


_ESCAPE = encode_basestring
_DUMPS = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str).encode
_CALLS_NONE = "[]"


# Instructions are not part of the conversation a session is: clients rewrite them between turns (a date, a
# plan mode) and their subagents fork the conversation under instructions of their own (Qwen Code's
# memory extraction sends the whole conversation, with the reply the proxy delivered, under another
# system prompt after every turn).
_INSTRUCTION_ROLES = frozenset({"system", "developer"})


# The roles only a client writes: a prefix ending in one of them is never a turn the proxy delivered, so it is
# no lineage key (and never looked up).
_CLIENT_ROLES = frozenset({"user", "tool"})


def conversation_digests(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """digests[k] identifies the first k+1 turns, instructions (system, developer) skipped."""
    return [digest for digest, _ in _walk(messages, hashlib.sha256())]


def _walk(messages: Sequence[Any], running: Any, *, every: bool = True) -> list[tuple[str, Any]]:
    """(digest, role) of each turn's prefix, extending `running` (the hash of the turns before); without `every`,
    the digest of a prefix that ends in a client's turn (never a lineage key) is left empty."""
    out: list[tuple[str, Any]] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in _INSTRUCTION_ROLES:
            continue
        running.update(_message_digest(message))
        out.append((running.copy().hexdigest()[:32] if every or role not in _CLIENT_ROLES else "", role))
    return out


def hash_conversation(messages: Sequence[Any]) -> Digests:
    running = hashlib.sha256()
    walked = _walk(messages, running, every=False)
    return Digests([digest for digest, role in walked if role not in _CLIENT_ROLES], running, len(walked))


def reply_digest(messages: Sequence[Mapping[str, Any]] | None, reply: Mapping[str, Any], known: Digests | None,
                 after: Sequence[Any] = ()) -> str | None:
    """conversation_digests([*messages, *after, reply])[-1], None when there is none. `messages` None stands
    for the request's conversation as `known` hashed it (its hashing is reused, not done again)."""
    if messages is None:
        if known is None:
            return None
        running, rest, turns = known.running.copy(), [*after, reply], known.turns
    else:
        running, rest, turns = hashlib.sha256(), [*messages, *after, reply], 0
    turns += len(_walk(rest, running))
    return running.hexdigest()[:32] if turns else None




# -- the tests


def _outcome(call: Callable[[], Any]) -> Any:
    """What a call returns, or the error it raises (its type and text): both must be the reference's."""
    try:
        return ("ok", call())
    except Exception as exc:  # the error is part of what is compared
        return ("raised", type(exc), str(exc))


def _digests(found: Digests) -> tuple[list[str], str, int]:
    return found.keys, found.running.hexdigest(), found.turns


def _clear() -> None:
    resolve._KEPT.clear()
    resolve._NAMED.clear()
    _KEPT.clear()


def _same(messages: Sequence[Any], reply: Any, after: Sequence[Any], lookback: int) -> None:
    _compare(messages, reply, after, lookback)
    _compare(messages, reply, after, lookback)  # again, from what the first round kept


def _compare(messages: Sequence[Any], reply: Any, after: Sequence[Any], lookback: int) -> None:
    assert _outcome(lambda: resolve.conversation_digests(messages)) == _outcome(
        lambda: conversation_digests(messages))
    now, then = _outcome(lambda: resolve.hash_conversation(messages)), _outcome(
        lambda: hash_conversation(messages))
    assert (now[0], _digests(now[1]) if now[0] == "ok" else now) == (
        then[0], _digests(then[1]) if then[0] == "ok" else then)
    assert _outcome(lambda: resolve.named_call_keys(messages, lookback)) == _outcome(
        lambda: named_call_keys(messages, lookback))
    assert _outcome(lambda: resolve.named_call_keys(messages)) == _outcome(lambda: named_call_keys(messages))
    assert _outcome(lambda: resolve.reply_digest(messages, reply, None, after)) == _outcome(
        lambda: reply_digest(messages, reply, None, after))
    if now[0] == "ok":
        assert _outcome(lambda: resolve.reply_digest(None, reply, now[1], after)) == _outcome(
            lambda: reply_digest(None, reply, then[1], after))
        assert _outcome(lambda: resolve.reply_digest(messages, reply, now[1], after)) == _outcome(
            lambda: reply_digest(messages, reply, then[1], after))
        # what a request waiting for the store holds: the keys of the calls its latest turns name
        pending = resolve.SessionResolver().prepare({}, messages)
        assert isinstance(pending, resolve.Pending)
        assert pending.digests.keys == then[1].keys
        named = [[call_digest(i) for i in ids] for ids in _named_ids_by_turn(messages)]
        assert [list(keys) for keys in pending.named] == named
        assert resolve._unique_keys(pending.named) == _keys_of_ids(_named_ids_by_turn(messages))


_ID = st.sampled_from(["call_1", "chatcmpl-tool-0123456789abcdef0123456789abcdef", "toolu_01ABCdef2345GHIjkl",
                       "abcdefghijklmnop", "123456789012345", "None", ""])
_TEXT = (st.text(alphabet=st.characters(codec="utf-8"), max_size=30)
         | st.text(alphabet=st.characters(), max_size=8)  # lone surrogates included: unreadable
         | st.sampled_from(["", " ", "\u2028", "\"\\\n\t\x00\x1f\x7f", "é", " padded \n", "x" * 300,
                            "Calling tools: [{'id': 'chatcmpl-tool-0123456789abcdef0123456789abcdef'}]",
                            "see toolu_01ABCdef2345GHIjkl and call_2"]))
_SCALAR = st.none() | st.booleans() | st.integers() | st.floats() | _TEXT
_JSONISH = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=6)
_ARGUMENTS = _TEXT | st.sampled_from(['{"b": 1, "a": [2, "x"]}', ' {"a": NaN} ', '[1e400]', '"\\ud800"',
                                      "\ufeff{}"]) | _JSONISH
_FUNCTION = st.fixed_dictionaries({}, optional={"name": _TEXT | _SCALAR, "arguments": _ARGUMENTS})
_CALL = (st.fixed_dictionaries({"id": _ID | _TEXT, "type": st.just("function"), "function": _FUNCTION})
         | st.fixed_dictionaries({}, optional={"id": _ID | _SCALAR, "function": _FUNCTION | _SCALAR})
         | _SCALAR)
_PART = (st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT | _SCALAR}) | _SCALAR
         | st.fixed_dictionaries({"type": st.just("image_url")}))
_CONTENT = _TEXT | st.none() | st.lists(_PART, max_size=3) | _JSONISH
_ROLE = st.sampled_from(["user", "assistant", "tool", "system", "developer", "function"]) | _TEXT | _SCALAR


_MESSAGE = st.fixed_dictionaries(
    {"role": _ROLE},
    optional={"content": _CONTENT, "tool_calls": st.lists(_CALL, max_size=3) | _SCALAR,
              "tool_call_id": _ID | _SCALAR, "name": _TEXT, "reasoning_content": _TEXT})
_MESSAGES = st.lists(_MESSAGE | _MESSAGE.map(OrderedDict) | _SCALAR | st.lists(_SCALAR, max_size=2), max_size=8)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_MESSAGES, _MESSAGE | _SCALAR, st.lists(_MESSAGE | _SCALAR, max_size=2), st.integers(0, 4), st.booleans())
@example([{"role": []}], {"role": "assistant"}, [], 1, False)  # unhashable roles: the same error
@example([{"role": "user", "content": "a"}], {"role": {"a": 1}}, [], 1, True)
def test_every_lineage_function_returns_what_it_returned(messages, reply, after, lookback, cold):
    if cold:
        _clear()
    _same(messages, reply, after, lookback)


def _twins(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The message with one of the fields a kept digest is keyed by changed (another string, or None)."""
    out = [{**message, "content": None if isinstance(message.get("content"), str) else "other"},
           {**message, "content": f"{message.get('content')} "}, {**message, "tool_call_id": "answers"},
           {**message, "role": "tool" if message.get("role") != "tool" else "user"}]
    calls = message.get("tool_calls")
    for position, call in enumerate(calls if isinstance(calls, list) else []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        for changed in ({**call, "id": f"{call.get('id')}1"}, {**call, "function": {**function, "name": None}},
                        {**call, "function": {**function, "arguments": f"{function.get('arguments')} 1"}},
                        {**call, "function": {**function, "arguments": '{"b": 1, "a": [2, "x"]}'}}):
            out.append({**message, "tool_calls": [*calls[:position], changed, *calls[position + 1:]]})
    return out


_PLAIN_CALL = st.fixed_dictionaries({"id": _ID | st.none(), "type": st.just("function"), "function": (
    st.fixed_dictionaries({"name": _TEXT | st.none(), "arguments": _TEXT | st.just('{"a": [2, "x"], "b": 1}')}))})
_PLAIN = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]), "content": _TEXT | st.none()},
                               optional={"tool_call_id": _ID | st.none(),
                                         "tool_calls": st.lists(_PLAIN_CALL, min_size=1, max_size=3)})


@settings(max_examples=300, deadline=None)
@given(st.lists(_PLAIN | _MESSAGE, min_size=1, max_size=4))
def test_a_turn_changed_in_any_field_is_not_taken_for_the_kept_one(messages):
    """Each turn kept first, then turns that differ from it in one field each: none may be read from what the other
    kept (the kept key covers every field the digest depends on)."""
    _same(messages, {"role": "assistant", "content": "done"}, [], 64)
    for position, message in enumerate(messages):
        for twin in _twins(message):
            _same([*messages[:position], twin, *messages[position + 1:]], {"role": "assistant"}, [], 64)


def _deep(depth: int) -> Any:
    nested: Any = "x"
    for _ in range(depth):
        nested = [nested]
    return nested


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "é\n" * 200_000}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "chatcmpl-tool-0123456789abcdef", "function": {"name": "bash", "arguments": "[" * 100_000}}]}],
    [{"role": "assistant", "content": _deep(5_000),
      "tool_calls": [{"id": "x", "function": {"arguments": _deep(5_000)}}]}],
    [{"role": "tool", "tool_call_id": "chatcmpl-tool-0123456789abcdef", "content": [{"text": _deep(5_000)}]}],
    [{"role": "assistant", "content": " chatcmpl-tool-0123456789abcdef " * 10_000}] * 3,
])
def test_huge_and_deep_turns_are_hashed_as_before(messages):
    _clear()
    _same(messages, {"role": "assistant", "content": "done"}, [], 64)


def test_a_long_conversation_is_keyed_as_before_in_its_latest_turns():
    """Past the lookback: only the latest turns' calls are named, and the kept keys line up with them."""
    messages: list[Any] = [{"role": "system", "content": "s"}]
    for turn in range(90):
        call_id = f"chatcmpl-tool-{turn:032d}a"
        messages += [{"role": "user", "content": f"step {turn}"}, "junk",
                     {"role": "assistant", "content": f"call {call_id}", "tool_calls": [
                         {"id": call_id, "function": {"name": "read", "arguments": "{}"}}]},
                     {"role": "developer", "content": "plan"},
                     {"role": "tool", "tool_call_id": call_id, "content": "ok"}]
    _clear()
    _same(messages, {"role": "assistant", "content": "done"}, [], 64)
    _same(messages[:-7], {"role": "assistant", "content": "done"}, [], 64)


def test_the_texts_json_is_jsons_for_every_character():
    """A turn's text is written by pydantic-core (`resolve._TEXT_JSON`): json's escaping, character for character
    (a pydantic-core that escaped another, say U+2028 or DEL, would change every stored digest)."""
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    assert resolve._TEXT_JSON(every) == encode_basestring(every).encode()
    for lone in ("\ud800", "a\udfff"):
        with pytest.raises(ValueError):
            resolve._TEXT_JSON(lone)
        with pytest.raises(ValueError):
            encode_basestring(lone).encode()
