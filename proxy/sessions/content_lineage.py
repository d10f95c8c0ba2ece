"""The lineage of what a client sent back, its call ids left out: how a client that rewrites the ids it was given
continues its session.

Lineage keys (proxy/sessions/resolve.py) hash each turn with its calls' ids, which the upstream made unique per
call, so identical scripted runs stay apart. Some clients send the delivered turns back under ids of their own:
Agno rewrites every id that lacks its provider's prefix to `call_` and a counter (`reformat_tool_call_ids`), and
smolagents renders a delivered call into the assistant turn's text (`Calling tools:\\n[{'id': ..., 'type':
'function', 'function': {'name': ..., 'arguments': ...}}]`), its result following as a user observation. For
them the same conversation is keyed a second way: each turn by its role, its text and its calls' names and
arguments (`free_turn`), ids and the call a tool result answers left out; a delivered reply is remembered under
that key too (`free_reply_key`), and a request whose own keys find nothing is looked up by it.

No id is read from text, and none links on its own: a turn counts by what the whole conversation before it holds,
so a model that writes another conversation's call id into its narration changes nothing (that id is dropped
like every other). Identical scripted runs share these keys; each continuation then takes a session still waiting
at that turn, as with identical ids (`SessionResolver._pick`).
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["FREE_PREFIX", "free_keys", "free_reply_key", "free_turn", "free_walk"]

FREE_PREFIX = "x"  # the lineage keys of this kind (the store holds them beside the others)
_CLIENT_ROLES = frozenset({"user", "tool"})
_INSTRUCTION_ROLES = frozenset({"system", "developer"})
_RENDERED = "Calling tools:\n"
_MAX_RENDERED = 1 << 18  # a rendering longer than this is not parsed (kept as text)
_KEPT_MAX = 16384
_KEPT: dict[int, bytes] = {}


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content).strip()
    return json.dumps(content, sort_keys=True, default=str)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            return raw.strip()
    return raw


def _rendered(text: str) -> tuple[str, list[list[Any]]] | None:
    """smolagents' rendering of the calls it was given at the end of an assistant turn's text: the text before it
    and each call's name and arguments; None when the text ends in no such rendering."""
    at = text.rfind(_RENDERED)
    if at < 0 or (at > 0 and text[at - 1] != "\n") or len(text) - at > _MAX_RENDERED:
        return None
    try:
        shown = ast.literal_eval(text[at + len(_RENDERED):].strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(shown, list) or not shown:
        return None
    calls = []
    for call in shown:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return None
        calls.append([function["name"], _arguments(function.get("arguments"))])
    return text[:at].strip(), calls


def _key(message: Mapping[str, Any]) -> int | None:
    """What decides a turn's id-free digest, as one hash of plain strings (any other shape is hashed afresh)."""
    role, content, calls = message.get("role"), message.get("content"), message.get("tool_calls")
    if type(role) is not str or not (content is None or type(content) is str):
        return None
    fields: tuple[Any, ...] = (role, content)
    for call in calls if type(calls) is list else ():
        function = call.get("function") if type(call) is dict else None
        name = function.get("name") if type(function) is dict else None
        arguments = function.get("arguments") if type(function) is dict else None
        if type(name) is not str or type(arguments) is not str:
            return None
        fields += (name, arguments)
    return hash(fields) if calls is None or type(calls) is list else None


def _canonical(message: Mapping[str, Any], role: Any) -> bytes:
    text = _text(message.get("content"))
    calls: list[list[Any]] = []
    raw = message.get("tool_calls")
    for call in raw if isinstance(raw, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            calls.append([function.get("name"), _arguments(function.get("arguments"))])
    if not calls and role == "assistant" and _RENDERED in text:
        rendered = _rendered(text)
        if rendered is not None:
            text, calls = rendered
    return json.dumps([role, text, calls], sort_keys=True, ensure_ascii=False, default=str).encode()


def free_turn(message: Mapping[str, Any]) -> bytes:
    """The digest of one turn by its role, text, and calls' names and arguments: ids left out."""
    key = _key(message)
    found = _KEPT.get(key) if key is not None else None
    if found is not None:
        return found
    role = message.get("role")
    try:
        canonical = _canonical(message, role)
    except (RecursionError, TypeError, ValueError):  # past what json walks: identified by its role only
        canonical = json.dumps([str(role), "unreadable"]).encode()
    digest = hashlib.sha256(canonical).digest()
    if key is not None:
        if len(_KEPT) >= _KEPT_MAX:
            del _KEPT[next(iter(_KEPT))]
        _KEPT[key] = digest
    return digest


def free_walk(messages: Iterable[Any], running: Any, keys: list[str] | None) -> int:
    """Extends `running` by each turn's id-free digest (instructions skipped); appends to `keys` the key of each
    prefix that ends in a turn the proxy may have delivered. Returns how many turns there were."""
    turns = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        role = role if isinstance(role, str) else None
        if role in _INSTRUCTION_ROLES:
            continue
        turns += 1
        running.update(free_turn(message))
        if keys is not None and role not in _CLIENT_ROLES:
            keys.append(FREE_PREFIX + running.copy().hexdigest()[:31])
    return turns


def free_keys(messages: Sequence[Any]) -> tuple[Any, list[str]]:
    """The id-free running hash of a conversation, and its keys (the weakest first)."""
    running = hashlib.sha256()
    keys: list[str] = []
    free_walk(messages, running, keys)
    return running, keys


def free_reply_key(running: Any, reply: Mapping[str, Any], after: Sequence[Any] = ()) -> str | None:
    """The id-free key of the conversation `running` hashed, extended by `after` and the delivered reply."""
    extended = running.copy()
    return FREE_PREFIX + extended.hexdigest()[:31] if free_walk([*after, reply], extended, None) else None
