"""Which session a request belongs to.

In order:
1. the first of the session headers present (by default those the clients send out of the box: OpenCode's
   `x-session-id`, Claude Code's `x-claude-code-session-id`, Codex's `session-id` and an older Codex's
   `session_id`);
2. the session id Claude Code writes into the body's `metadata.user_id` (`user_<hash>_account_<id>_session_<uuid>`,
   or from 2.1.78 a JSON string `{"device_id", "account_uuid", "session_id"}`);
3. `previous_response_id` (Responses API): the session of the response the proxy returned under that id;
4. lineage: a request continues a session only when its conversation extends a turn the proxy delivered in it,
   keyed on that exact turn as the client received it (its text and its calls with their ids). Two
   conversations that merely begin alike (every run of a scripted agent) are two sessions; runs whose
   delivered turns are identical, ids and all, share a digest, and each continuation takes a session still
   waiting at that turn (the oldest first), so interleaved identical runs neither merge nor split;
5. a delivered call named again, in the structured fields only (an assistant turn's `tool_calls[].id`, a tool
   result's `tool_call_id`; a Responses `call_id` and an Anthropic `tool_use.id` / `tool_result.tool_use_id` arrive
   as those): a client that rewrites its conversation each step but keeps the ids it was given continues the
   session that was delivered the latest call it names. An id written in text (a model's narration "Calling
   tools: [{'id': 'chatcmpl-tool-...'}]") is never read: the model writes text, and could name a stranger's call;
6. the lineage of what the client sent back with its call ids left out (proxy/sessions/content_lineage.py): a
   client that rewrites the ids it was given (Agno's `call_0000...`) or renders the calls into its own text
   (smolagents) continues by its turns' text, names and arguments, the whole conversation before them included.
Runs that share a key (identical scripted runs) are told apart as in 4.

`namespace` (a project key's, DESIGN invariant 10; None without one): the sessions of one namespace never merge
with another's or with those of requests without one. Every lineage key is hashed with it, and a session a header
or the body names becomes `NAMESPACE:ID` (the namespace hashed to 16 characters when longer than 32).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, NamedTuple

from pydantic_core import to_json
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.logs import get_logger
from proxy.record import Digests, SessionRef
from proxy.sessions.content_lineage import FREE_PREFIX, id_free, may_render
from proxy.sessions.rewritten import sent_back
from proxy.store import tables
from proxy.store.recorder import queue_lineage
from proxy.store.writer import StoreWriter

__all__ = ["DEFAULT_SESSION_HEADERS", "Pending", "SessionResolver", "body_session", "call_digest",
           "conversation_digests", "hash_conversation", "named_call_keys", "reply_digest", "response_digest", "spaced"]

DEFAULT_SESSION_HEADERS = ("x-session-id", "x-claude-code-session-id", "session-id", "session_id")

log = get_logger("proxy.sessions.resolve")

# How many of a conversation's latest prefixes are looked up in the shared store: the turn a
# request continues is one of its last few messages.
_SHARED_LOOKBACK = 64
_MAX_ID = 128
_LEGACY_USER_ID = re.compile(r"_session_([0-9A-Za-z-]{8,128})$")
# Only ids long and mixed enough to be unique per call key a session (a client's own `call_1` never does).
_MIN_ID = 12
_NAMESPACE_TAG = 32


class Pending(NamedTuple):
    """A request's lineage keys (`SessionResolver.prepare`), waiting to be looked up (`finish`)."""

    digests: Digests
    keys: list[str]
    # the lineage keys (`call_digest`) of the call ids each of its latest turns names, the latest last (empty: not
    # needed)
    named: list[tuple[str, ...]]
    # the id-free keys of its prefixes (proxy/sessions/content_lineage.py), the weakest first
    free: Sequence[str] = ()


def spaced(key: str, namespace: str | None) -> str:
    """A lineage key within a namespace (the key itself without one)."""
    if namespace is None:
        return key
    return "n" + hashlib.sha256(f"{namespace}\x00{key}".encode()).hexdigest()[:31]


def _spaced_all(keys: Iterable[str], namespace: str | None) -> list[str]:
    return list(keys) if namespace is None else [spaced(key, namespace) for key in keys]


def named_session(value: str, namespace: str | None) -> str:
    """The id of a session a header or the body names, within a namespace."""
    if namespace is None:
        return value[:_MAX_ID]
    tag = namespace if len(namespace) <= _NAMESPACE_TAG else hashlib.sha256(namespace.encode()).hexdigest()[:16]
    return f"{tag}:{value}"[:_MAX_ID]


def body_session(payload: Mapping[str, Any] | None) -> str | None:
    """Claude Code's session id in `metadata.user_id` (both of its formats), else None."""
    metadata = payload.get("metadata") if isinstance(payload, Mapping) else None
    user_id = metadata.get("user_id") if isinstance(metadata, Mapping) else None
    if not isinstance(user_id, str) or not user_id:
        return None
    if user_id.startswith("{"):
        try:
            parsed = json.loads(user_id)
        except ValueError:
            return None
        found = parsed.get("session_id") if isinstance(parsed, dict) else None
        return found[:_MAX_ID] if isinstance(found, str) and found else None
    match = _LEGACY_USER_ID.search(user_id)
    return match.group(1) if match else None


def response_digest(response_id: str) -> str:
    """The lineage key of a response id the proxy returned (`previous_response_id` continues it)."""
    return "r" + hashlib.sha256(response_id.encode()).hexdigest()[:31]


def call_digest(call_id: str) -> str:
    """The lineage key of a call id the proxy delivered (a request naming it again continues its session)."""
    return "c" + hashlib.sha256(call_id.encode()).hexdigest()[:31]


def _distinctive(call_id: Any) -> bool:
    """An id unique enough to name one delivered call: long, with both letters and digits."""
    return (isinstance(call_id, str) and _MIN_ID <= len(call_id) <= _MAX_ID and any(c.isdigit() for c in call_id)
            and any(c.isalpha() for c in call_id))


def _named_ids(message: Mapping[str, Any]) -> list[str]:
    """The call ids one message names in its structured fields, in order: its calls' ids and the call it answers.
    Never an id written in text: the model writes text."""
    found: list[Any] = []  # unvalidated: filtered below
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            found.append(call.get("id"))
    found.append(message.get("tool_call_id"))
    return [i for i in found if _distinctive(i)]


def _named_keys(message: Mapping[str, Any]) -> tuple[str, ...]:
    return _named_keys_kept(message, _kept_key(message))


def _named_keys_kept(message: Mapping[str, Any], key: int | None) -> tuple[str, ...]:
    """The lineage keys (`call_digest`) of the call ids one message names (`_named_ids`), kept by its `_kept_key`: the
    latest turns are read again by every request that extends no delivered turn."""
    found = _NAMED.get(key) if key is not None else None
    if found is None:
        found = tuple(call_digest(i) for i in _named_ids(message))
        if key is not None:
            if len(_NAMED) >= _KEPT_MAX:
                del _NAMED[next(iter(_NAMED))]
            _NAMED[key] = found
    return found


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
    return _unique_keys([_named_keys(message) for message in _latest_turns(messages, lookback)])


def _named_keys_by_turn(messages: Sequence[Mapping[str, Any]],
                        kept_keys: Sequence[int | None] | None = None) -> list[tuple[str, ...]]:
    """`_named_keys` of the latest turns; `kept_keys`: each turn's `_kept_key`, as `_walk` found them."""
    latest = _latest_turns(messages, _SHARED_LOOKBACK)
    tail = kept_keys[-len(latest):] if kept_keys is not None and latest else []
    if len(tail) != len(latest):  # no keys given (or not `_walk`'s turns)
        return [_named_keys(message) for message in latest]
    return [_named_keys_kept(message, key) for message, key in zip(latest, tail, strict=True)]


def _unique_keys(keys_by_turn: Sequence[Sequence[str]]) -> list[str]:
    keys = [key for keys in keys_by_turn for key in keys]
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
            return _LOADS(raw)
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
    digest time was that per-message setup. The text, most of the bytes, is written by pydantic-core's JSON
    encoder, which escapes a str as json's does (ensure_ascii off) and writes UTF-8 at once, in half the time;
    both refuse a lone surrogate (a ValueError: the message is unreadable either way)."""
    encoded = _CALLS_NONE if not calls else _dumps_calls(calls)
    tail = "null" if answers is None else _ESCAPE(answers)
    return b"".join((f"[{_ESCAPE(role)}, ".encode(), _TEXT_JSON(text), f", {encoded}, {tail}]".encode()))


def _kept_key(message: Mapping[str, Any]) -> int | None:
    """What decides a message's digest, as one keyed hash (`_walk`'s loop, for one message)."""
    role, content, answers = message.get("role"), message.get("content"), message.get("tool_call_id")
    if (type(role) is not str or not (answers is None or type(answers) is str)
            or not (content is None or type(content) is str)):
        return None
    raw_calls = message.get("tool_calls")
    if not raw_calls:
        return hash((role, answers, content))
    return _calls_key(role, answers, content, raw_calls) if type(raw_calls) is list else None


def _calls_key(role: str, answers: str | None, content: str | None, raw_calls: list[Any]) -> int | None:
    fields: tuple[Any, ...] = (role, answers, content)
    for call in raw_calls:
        function = call.get("function") if type(call) is dict else None
        if type(function) is not dict:
            return None
        call_id, name, arguments = call.get("id"), function.get("name"), function.get("arguments")
        if (not (call_id is None or type(call_id) is str) or not (name is None or type(name) is str)
                or type(arguments) is not str):
            return None
        fields += (call_id, name, arguments)
    return hash(fields)


# A turn comes back in every later request of its conversation: its digest (and the call keys it names) are kept
# between requests, keyed by what decides them, so that each request hashes only the turns new to it. The key is
# Python's hash of the tuple (role, the call it answers, text, and each call's id, name and arguments), all plain
# strings or None (any other shape is hashed afresh, never kept): no text is held. Python's str hash is SipHash
# keyed per process, and a tuple's hash mixes its items' hashes and its length, so a model that writes text it
# cannot see hashed can make two turns share a key no more often than two random 64-bit values collide: for a
# turn that differs in one string (a text), never unless that string's SipHash does.
# At most 16,384 turns each: ~130 bytes an entry kept, ~100 named (most name no call), ~4 MB in all.
_KEPT_MAX = 16384
# How long a session the store held no stated root for is not asked again (another process may record one later).
_NO_ROOT_SECONDS = 5.0
_KEPT: dict[int, bytes] = {}
_NAMED: dict[int, tuple[str, ...]] = {}


_ESCAPE = encode_basestring
_TEXT_JSON = to_json
_DUMPS = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str).encode
_CALLS_NONE = "[]"
# json.loads without its checks of what it is given (a str here): a leading BOM, which json.loads refuses by name, the
# decoder refuses as a value it cannot read (a ValueError either way).
_LOADS = json.JSONDecoder().decode
# `_DUMPS`'s C encoder, made once rather than per message (JSONEncoder.encode makes one per call: half its time on a
# call's few bytes). No circular-reference markers: parsed JSON has no cycles, and a cycle a caller builds still
# fails (RecursionError rather than ValueError), as unreadable either way.
_C_CALLS = c_make_encoder(None, str, encode_basestring, None, ": ", ", ", True, False, True) if c_make_encoder else None


_sha256 = hashlib.sha256


def _dumps_calls(calls: list[Any]) -> str:
    return "".join(_C_CALLS(calls, 0)) if _C_CALLS is not None else _DUMPS(calls)


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
    out: list[str] = []
    _walk(messages, hashlib.sha256(), out, every=True)
    return out


def _walk(messages: Iterable[Any], running: Any, keys: list[str] | None, *, every: bool = False,
          kept_keys: list[int | None] | None = None, turns_out: list[tuple[Any, bytes]] | None = None) -> int:
    """Extends `running` (the hash of the turns before) by each turn's digest and returns how many turns there were;
    appends to `keys` the digest of each prefix, or with `every` off of each that ends in a turn the proxy may have
    delivered, to `kept_keys` each turn's `_kept_key`, and to `turns_out` each turn with its digest (for
    `_free_walk`). One loop with its names bound: it runs over every message of every request."""
    kept, kept_max, instruction, client = _KEPT, _KEPT_MAX, _INSTRUCTION_ROLES, _CLIENT_ROLES
    kept_get, update, sha256, str_, none = _KEPT.get, running.update, _sha256, str, None
    turns = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        get = message.get
        role = get("role")
        if role in instruction:
            continue
        turns += 1
        # `_kept_key`, inline
        content, answers, key = get("content"), get("tool_call_id"), None
        if (type(role) is str_ and (answers is none or type(answers) is str_)
                and (content is none or type(content) is str_)):
            raw_calls = get("tool_calls")
            if not raw_calls:
                key = hash((role, answers, content))
            elif type(raw_calls) is list:
                key = _calls_key(role, answers, content, raw_calls)
        if kept_keys is not None:
            kept_keys.append(key)
        digest = kept_get(key) if key is not None else None
        if digest is None:
            digest = sha256(_canonical(message)).digest()
            if key is not None:
                if len(kept) >= kept_max:
                    del kept[next(iter(kept))]  # the oldest: a conversation's turns are asked for again in order
                kept[key] = digest
        update(digest)
        if turns_out is not None:
            turns_out.append((message, digest))
        if keys is not None and (every or role not in client):
            keys.append(running.copy().hexdigest()[:32])
    return turns


# The id-free digests of turns that carry call ids, kept like `_KEPT` (by the turn's `_kept_key`).
_KEPT_FREE: dict[int, bytes] = {}


def _free_walk(turns: Iterable[tuple[Any, bytes]], running: Any, keys: list[str] | None,
               kept_keys: Sequence[int | None] = ()) -> None:
    """Extends the id-free running hash (proxy/sessions/content_lineage.py) by the turns `_walk` hashed: a turn that
    carries no call id counts by its own digest, one that does by the digest of what `id_free` reads of it. Appends
    to `keys` the id-free key of each prefix that ends in a turn the proxy may have delivered."""
    update, client, kept_get = running.update, _CLIENT_ROLES, _KEPT_FREE.get
    for index, (message, digest) in enumerate(turns):
        get = message.get
        if get("tool_calls") or get("tool_call_id") is not None or (get("role") == "assistant" and may_render(
                get("content"))):
            key = kept_keys[index] if index < len(kept_keys) else None
            found = kept_get(key) if key is not None else None
            if found is None:
                free = id_free(message)
                found = _sha256(_canonical(free)).digest() if free is not None else digest
                if key is not None:
                    if len(_KEPT_FREE) >= _KEPT_MAX:
                        del _KEPT_FREE[next(iter(_KEPT_FREE))]
                    _KEPT_FREE[key] = found
            digest = found
        update(digest)
        if keys is not None and message.get("role") not in client:
            keys.append(FREE_PREFIX + running.copy().hexdigest()[:31])


def hash_conversation(messages: Sequence[Any]) -> Digests:
    running = hashlib.sha256()
    keys: list[str] = []
    turns = _walk(messages, running, keys)
    return Digests(keys, running, turns)


def _hash_turns(messages: Sequence[Any], namespace: str | None = None
                ) -> tuple[Digests, list[int | None], list[tuple[Any, bytes]]]:
    """`hash_conversation`, each turn's `_kept_key` (for `_named_keys_by_turn` and `_free_walk`), and each turn
    with its digest (for `_free_walk`: one walk of the conversation, not two)."""
    keys: list[str] = []
    kept_keys: list[int | None] = []
    hashed: list[tuple[Any, bytes]] = []
    running = hashlib.sha256()
    turns = _walk(messages, running, keys, kept_keys=kept_keys, turns_out=hashed)
    return Digests(keys, running, turns, namespace=namespace), kept_keys, hashed


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
    turns += _walk(rest, running, None)
    return running.hexdigest()[:32] if turns else None


def _free_reply_key(messages: Sequence[Mapping[str, Any]] | None, reply: Mapping[str, Any], known: Digests | None,
                    after: Sequence[Any] = ()) -> str | None:
    """The id-free key of the conversation extended by `after` and the delivered reply (`reply_digest`'s twin)."""
    if messages is None and (known is None or known.free is None):
        return None  # its conversation extended a delivered turn as the client got it: no id-free key needed
    hashed: list[tuple[Any, bytes]] = []
    if messages is None:
        assert known is not None
        running, rest = known.free.copy(), [*after, reply]
    else:
        running, rest = hashlib.sha256(), [*messages, *after, reply]
    kept_keys: list[int | None] = []
    if not _walk(rest, hashlib.sha256(), None, kept_keys=kept_keys, turns_out=hashed):
        return None
    _free_walk(hashed, running, None, kept_keys)
    return FREE_PREFIX + running.hexdigest()[:31]


class SessionResolver:
    """Resolves sessions from headers and the body, else from lineage kept in memory and, when given a store, in
    the database too, so that replicas sharing one database continue each other's sessions."""

    def __init__(self, headers: str | Sequence[str] | None = None, *, max_entries: int = 200_000,
                 engine: AsyncEngine | None = None, writer: StoreWriter | None = None, shared: bool = False) -> None:
        if headers is None:
            headers = DEFAULT_SESSION_HEADERS
        elif isinstance(headers, str):  # one extra header, after the defaults (the setting's older form)
            headers = (*DEFAULT_SESSION_HEADERS, headers)
        self._headers = tuple(dict.fromkeys(h.lower() for h in headers if h))
        # digest -> the sessions that hold it, oldest first; session -> the digest it last reached (its head)
        self._lineage: OrderedDict[str, list[str]] = OrderedDict()
        self._heads: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        # (digest, session) a request has continued from, before its reply is remembered (identical runs)
        self._claimed: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._roots: OrderedDict[str, str] = OrderedDict()  # session -> the project root its client stated
        self._no_root: OrderedDict[str, float] = OrderedDict()  # session -> when the store last held no root for it
        # Keys the shared store was asked for and did not hold: a key is written only once its turn is delivered,
        # so one missing when a conversation already shows its turn stays missing (asked once, not per request).
        self._missing: OrderedDict[str, None] = OrderedDict()
        self._max_entries = max_entries
        self._engine = engine
        self._writer = writer
        # Other processes answer this store's conversations too (`serve --workers N`, replicas): what a request
        # continues from must be committed before its answer ends (`remember` says so), and a session's stated
        # root is written for them (`project_root`, `load_root`).
        self._across = shared and engine is not None and writer is not None

    def _named(self, headers: Mapping[str, str], payload: Mapping[str, Any] | None,
               namespace: str | None = None) -> SessionRef | None:
        for name in self._headers:
            value = headers.get(name)
            if value:
                return SessionRef(named_session(value, namespace), "header", False)
        found = body_session(payload)
        if found is not None:
            return SessionRef(named_session(found, namespace), "metadata", False)
        return None

    @staticmethod
    def _keys(digests: Digests, payload: Mapping[str, Any] | None) -> list[str]:
        """The lineage keys a request may continue, the weakest first: its conversation's prefixes, then the
        response it names (`previous_response_id`), which decides over any prefix."""
        keys = list(digests.keys)
        previous = payload.get("previous_response_id") if isinstance(payload, Mapping) else None
        if isinstance(previous, str) and previous:
            keys.append(response_digest(previous))
        return keys

    def _pick(self, digest: str, sessions: Sequence[str], heads: Mapping[str, tuple[str, ...]]) -> str:
        """One of the sessions holding `digest`: the only one, else the oldest still waiting there (its head,
        not yet continued by another request), else the oldest."""
        if len(sessions) > 1:
            for session in sessions:
                if digest in heads.get(session, (digest,)) and (digest, session) not in self._claimed:
                    break
            else:
                session = sessions[0]
        else:
            session = sessions[0]
        self._claimed[(digest, session)] = None
        while len(self._claimed) > self._max_entries:
            self._claimed.popitem(last=False)
        return session

    def _local(self, keys: list[str]) -> tuple[str | None, int]:
        """The session of the longest key this process knows, and that key's position (-1: none)."""
        for position in range(len(keys) - 1, -1, -1):
            digest = keys[position]
            found = self._lineage.get(digest)
            if found:
                self._lineage.move_to_end(digest)
                return self._pick(digest, found, self._heads), position
        return None, -1

    def resolve(self, headers: Mapping[str, str], messages: Sequence[Mapping[str, Any]] | None,
                payload: Mapping[str, Any] | None = None, *, namespace: str | None = None) -> SessionRef:
        """From headers, the body and this process's memory only."""
        prepared = self.prepare(headers, messages, payload, namespace=namespace)
        if isinstance(prepared, SessionRef):
            return prepared
        found = self._local(prepared.keys)[0]
        if found is None:
            found = self._local_named(prepared.named) or self._local(list(prepared.free))[0]
        return self._lineage_ref(found, prepared.digests)

    async def aresolve(self, headers: Mapping[str, str], messages: Sequence[Mapping[str, Any]] | None,
                       payload: Mapping[str, Any] | None = None, *, namespace: str | None = None) -> SessionRef:
        """Like resolve, then the shared store: another replica may have served the earlier turns."""
        return await self.finish(self.prepare(headers, messages, payload, namespace=namespace))

    def prepare(self, headers: Mapping[str, str], messages: Sequence[Mapping[str, Any]] | None,
                payload: Mapping[str, Any] | None = None, *, namespace: str | None = None) -> SessionRef | Pending:
        """`aresolve`'s first half, at once: the session the headers or the body name, else the conversation's
        lineage keys, which `finish` looks up without the conversation (nothing waits holding it). `namespace`:
        a project key's (see the module's docstring), None without one."""
        if (ref := self._named(headers, payload, namespace)) is not None:
            return ref
        digests, kept_keys, hashed = _hash_turns(messages or [], namespace)
        keys = _spaced_all(self._keys(digests, payload), namespace)
        # The call ids it names, and its id-free lineage, are read only where no turn it extends is known here (a
        # rewriting client's step, a new conversation, or another replica's session): `finish` may need them, and
        # it gets no messages. A client that sent back a delivered turn as it got it will again: its replies need
        # no id-free key (`remember` records one where the digests hold the id-free hash).
        known = not self._lineage.keys().isdisjoint(keys)  # a key is held only with its sessions
        if known:
            return Pending(digests, keys, [])
        free: list[str] = []
        digests.free = hashlib.sha256()
        _free_walk(hashed, digests.free, free, kept_keys)
        named = [tuple(_spaced_all(turn, namespace)) for turn in _named_keys_by_turn(messages or [], kept_keys)]
        return Pending(digests, keys, named, _spaced_all(free, namespace))

    async def finish(self, prepared: SessionRef | Pending) -> SessionRef:
        """`aresolve`'s second half: the lineage keys looked up in this process, then in the shared store."""
        if isinstance(prepared, SessionRef):
            return prepared
        digests, keys = prepared.digests, prepared.keys
        found, position = self._local(keys)
        # Another replica may have delivered a later turn of this conversation than the one this process knows:
        # the shared store is asked for the keys past it; where no turn it extends is known here, for the weaker
        # keys too (a delivered call it names by id in a structured field, its id-free lineage), in the same
        # question: the strongest it holds wins.
        if self._engine is not None:
            asked = [key for key in keys[position + 1:] if key not in self._missing][-_SHARED_LOOKBACK:]
            if found is None:
                weak = [key for key in (*prepared.free, *_unique_keys(prepared.named)) if key not in self._missing]
                asked = [*weak[-_SHARED_LOOKBACK:], *asked]
            if asked:
                found = await self._shared(asked) or found
        if found is None:  # no delivered turn extended: a rewritten conversation may name a delivered call
            found = self._local_named(prepared.named)
        if found is None:  # nor any by its id: the client may have rewritten the ids it was given
            found = self._local(list(prepared.free))[0]
        return self._lineage_ref(found, digests)

    def _local_named(self, keys_by_turn: Sequence[Sequence[str]]) -> str | None:
        """The session of the latest delivered call the conversation names (its latest turns' call keys), from
        this process's memory: read from the latest turn back."""
        for keys in reversed(keys_by_turn):
            for key in reversed(keys):
                if found := self._lineage.get(key):
                    self._lineage.move_to_end(key)
                    return self._pick(key, found, self._heads)
        return None

    @staticmethod
    def _lineage_ref(found: str | None, digests: Digests) -> SessionRef:
        if found is not None:
            return SessionRef(found, "lineage", False, digests)
        return SessionRef("lin_" + uuid.uuid4().hex, "lineage", True, digests)

    async def _shared(self, keys: list[str]) -> str | None:
        assert self._engine is not None
        lineage = tables.session_lineage
        query = select(lineage.c.digest, lineage.c.session_id, lineage.c.created_at).where(
            lineage.c.digest.in_(keys))
        try:
            async with self._engine.connect() as conn:
                held: dict[str, list[tuple[float, str]]] = {}
                for digest, session, created in await conn.execute(query):
                    held.setdefault(digest, []).append((created, session))
                self._note_missing(k for k in keys if k not in held)
                best = next((k for k in reversed(keys) if k in held), None)
                if best is None:
                    return None
                sessions = [s for _, s in sorted(held[best])]
                heads: dict[str, tuple[str, ...]] = {}
                if len(sessions) > 1:  # identical runs: which of them still wait at this turn
                    reached = {session: created for created, session in held[best]}
                    latest = select(lineage.c.session_id, func.max(lineage.c.created_at)).where(
                        lineage.c.session_id.in_(sessions)).group_by(lineage.c.session_id)
                    for session, newest in await conn.execute(latest):
                        heads[session] = (best,) if newest <= reached[session] else ()
        except SQLAlchemyError as exc:
            log.warning("sessions.lineage_lookup_failed", error=str(exc))
            return None
        # The store's copy lags this process's writer: a session this process served that the store has not seen
        # hold the key yet holds it too, waiting there or not by its head here (the ones this process continued
        # from it are claimed: `_pick`).
        stored = set(sessions)
        for session in self._lineage.get(best) or ():
            if session not in stored:
                sessions.append(session)
                heads[session] = self._heads.get(session, (best,))
        for session in sessions:
            self._hold(best, session)
        return self._pick(best, sessions, heads)

    def _note_missing(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._missing[key] = None
            self._missing.move_to_end(key)
        while len(self._missing) > self._max_entries:
            self._missing.popitem(last=False)

    def _hold(self, digest: str, session: str) -> None:
        holders = self._lineage.setdefault(digest, [])
        if session not in holders:
            holders.append(session)
        self._lineage.move_to_end(digest)
        while len(self._lineage) > self._max_entries:
            self._lineage.popitem(last=False)

    def project_root(self, session: SessionRef, stated: str | None) -> str | None:
        """The root the request's client states, kept for its session; a request of the session that states
        none (a title or a subagent request) gets the one its session's client stated last (in the store too, where
        other processes answer the session's requests: `load_root` reads it there first)."""
        if stated is not None:
            if self._across and self._roots.get(session.id) != stated:
                self._writer.put(tables.session_roots, {  # type: ignore[union-attr]
                    "id": uuid.uuid4().hex, "session_id": session.id, "root": stated, "created_at": time.time()})
            self._keep_root(session.id, stated)
            return stated
        return self._roots.get(session.id)

    def _keep_root(self, session_id: str, root: str) -> None:
        self._roots[session_id] = root
        self._roots.move_to_end(session_id)
        while len(self._roots) > self._max_entries:
            self._roots.popitem(last=False)

    async def load_root(self, session: SessionRef, stated: str | None) -> None:
        """Before `project_root`, where the request states no root and this process knows none for its session:
        the root another process kept for it (a session is continued wherever its requests land)."""
        if stated is not None or not self._across or session.is_new or session.id in self._roots:
            return
        asked = self._no_root.get(session.id)
        if asked is not None and time.monotonic() - asked < _NO_ROOT_SECONDS:
            return  # asked a moment ago: a session whose client never states one is not asked at every request
        assert self._engine is not None
        roots = tables.session_roots
        query = (select(roots.c.root).where(roots.c.session_id == session.id)
                 .order_by(roots.c.created_at.desc()).limit(1))
        try:
            async with self._engine.connect() as conn:
                root = (await conn.execute(query)).scalar()
        except SQLAlchemyError as exc:
            log.warning("sessions.root_lookup_failed", error=str(exc)[:300])
            return
        if isinstance(root, str):
            self._no_root.pop(session.id, None)
            self._keep_root(session.id, root)
            return
        self._no_root[session.id] = time.monotonic()
        self._no_root.move_to_end(session.id)
        while len(self._no_root) > self._max_entries:
            self._no_root.popitem(last=False)

    def remember(self, session: SessionRef, messages: Sequence[Mapping[str, Any]] | None,
                 reply: Mapping[str, Any] | None = None, *, after: Sequence[Any] = (),
                 response_id: str | None = None) -> bool:
        """Record the conversation the client now holds, so its next request continues this session.

        Only the conversation that ends with the reply the proxy delivered (exactly as the client received it)
        is recorded, and the response id the client was given: a later request continues the session only by
        extending it or naming that response. The request's own messages are not, so a second conversation that
        starts with the same messages is a session of its own.
        Not for a session a header or the body named: that client names its sessions itself, and hashing a
        60k-token conversation costs most of a millisecond per request. `messages` None is the request's
        conversation as hashed when its session was resolved; `after` what came between it and the reply.
        True where other processes read the keys queued for the store: the answer's end waits for their commit,
        so that a next request answered elsewhere finds them (no window of `store_flush_seconds`).
        """
        if session.source != "lineage" or not isinstance(reply, Mapping) or not reply:
            return False
        if session.digests is not None and session.digests.rewritten:  # hashed as its client sends it back
            reply, after = sent_back(reply), [sent_back(m) if isinstance(m, Mapping) else m for m in after]
        last = reply_digest(messages, reply, session.digests, after)
        keys = [last] if last is not None else []
        if response_id:
            keys.append(response_digest(response_id))
        keys += [call_digest(i) for i in _named_ids({"tool_calls": reply.get("tool_calls")})]
        if (free_key := _free_reply_key(messages, reply, session.digests, after)) is not None:
            keys.append(free_key)
        keys += session.digests.also if session.digests is not None else ()
        keys = _spaced_all(keys, session.digests.namespace if session.digests is not None else None)
        for digest in keys:
            self._hold(digest, session.id)
        if keys:
            self._heads[session.id] = tuple(keys)
            self._heads.move_to_end(session.id)
            while len(self._heads) > self._max_entries:
                self._heads.popitem(last=False)
        if self._writer is not None and keys:
            queue_lineage(self._writer, session.id, keys)
            return self._across
        return False
