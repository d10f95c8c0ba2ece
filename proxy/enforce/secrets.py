"""Secrets in a request stopped before it goes upstream (DESIGN invariant 11): the texts the client sends back to
the model are scanned (proxy/policy/secrets/) and what is sent carries `[redacted: TYPE]` in their place.

Which texts, per route (the client's own copy is never touched; lineage and judging read the client's):
- a tool's result: chat `role: tool` (and the older `function`) messages; Responses items whose type ends in
  `_output` (`function_call_output`, `custom_tool_call_output`, `local_shell_call_output`, ...) and `mcp_call`
  output; Messages blocks whose type ends in `tool_result` (`tool_result`, `mcp_tool_result`, the server tools'
  results), their nested content lists included. Every string inside is scanned but ids, types, names and
  images (a `data:` URL, a base64 source).
- a file the client inlines into a user turn: Anthropic `document` blocks with a text source, and in a user
  turn's text the fenced blocks (```` ``` ```` or `~~~`: aider, Continue and Cline put file bodies there) and
  `<file_content>` / `<file>` elements. The rest of a user turn is what the user typed: it is theirs to send,
  and is left as written (docs/decisions/0114-secrets-by-content.md).

The redacted request is spliced into the client's bytes item by item (`splice_items`): an item with no secret
goes upstream byte for byte, one with a secret is re-encoded, the same way every time, so the next request of
the conversation repeats the same bytes and vLLM's prefix cache keeps hitting. Each text is read once per
process (`_redacted`): a conversation sends its earlier results again with every turn, and only the new ones are
scanned. (A gate over the whole raw body for the rules' keywords cost as much as walking the turns, and a real
conversation's body always holds one: it is gone.)
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections import Counter, OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from proxy.enforce.body_splice import splice_items
from proxy.policy.schema import Policy
from proxy.policy.secrets import Redacted, compile_pattern, load_rules, redact_texts

__all__ = ["Redactions", "conversation_key", "forget_texts", "redact_request"]

# Conversation field per route; a route not here (raw completions: a prompt, not turns) is not scanned.
_CONVERSATION = {"chat": "messages", "responses": "input", "messages": "messages"}

# Keys whose strings are never a tool's output: what names or links the items.
_NOT_TEXT = frozenset({"type", "id", "call_id", "tool_call_id", "tool_use_id", "name", "status", "role",
                       "media_type", "server_name", "cache_control"})
_IMAGE_TYPES = frozenset({"image", "image_url", "input_image", "input_file", "computer_screenshot"})

# What a client's user turn marks as a file's content rather than the user's words.
_INLINED = re.compile(r"(?ms)^[ \t]*(```|~~~)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$"
                      r"|<(file_content|file)\b[^>]*>(.*?)</\3>")



@dataclass(slots=True)
class Redactions:
    """What one request's redaction did: per (call, type) how many secrets were replaced. `call` is the id of
    the tool call whose result held them, or `<role>#<turn index>` for a file inlined in a turn."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)

    def __bool__(self) -> bool:
        return bool(self.counts)


@dataclass(slots=True)
class _Text:
    item: int  # the turn's index in the conversation
    path: tuple[Any, ...]  # keys and indices from the turn to the string
    span: tuple[int, int] | None  # the part of the string scanned (a user turn's inlined file), else all of it
    call: str
    text: str


def conversation_key(route: str) -> str | None:
    """The request field whose turns are scanned on this route; None: the route has no turns (a raw prompt)."""
    return _CONVERSATION.get(route)



def redact_request(body: bytes, conversation: Any, route: str, policy: Policy, *,
                   apply: bool = True) -> tuple[bytes, Redactions]:
    """The body to send upstream with the secrets of its tool results and inlined files replaced, and what was
    replaced. `conversation` is the body's turns as parsed (`conversation_key`). `apply` False (observe mode)
    counts what would be replaced and returns the body unchanged."""
    key = _CONVERSATION.get(route)
    rules_policy = policy.secrets
    if key is None or not rules_policy.redact or not isinstance(conversation, list):
        return body, Redactions()
    texts = list(_texts(route, conversation))
    if not texts:
        return body, Redactions()
    results = _redacted([t.text for t in texts], tuple(rules_policy.allow))
    done = Redactions()
    changed: dict[int, Any] = {}
    for place, result in zip(texts, results, strict=True):
        if result is None:
            continue
        for kind, count in result.counts.items():
            done.counts[(place.call, kind)] += count
        if apply:
            item = changed.setdefault(place.item, copy.deepcopy(conversation[place.item]))
            _put(item, place, result.text)
    if not changed:
        return body, done
    spliced = splice_items(body, key, changed)
    if spliced is None:
        whole = {**json.loads(body), key: [changed.get(i, turn) for i, turn in enumerate(conversation)]}
        spliced = json.dumps(whole, ensure_ascii=False).encode()
    return spliced, done


# What each text came to, by its digest and the policy's allow patterns: a conversation sends its earlier tool
# results again with every turn, and each is scanned once, not once per turn. The same text then gives the same
# bytes for as long as it is kept (the prefix vLLM caches). Bounded in entries, and in the bytes of the redacted
# copies the entries of texts with a secret hold.
_SEEN_TEXTS = 8192
_KEPT_REDACTED_CHARS = 32 * 1024 * 1024
_seen: OrderedDict[tuple[bytes, tuple[str, ...]], Redacted | None] = OrderedDict()
_kept_chars = 0


def _redacted(texts: list[str], allow_patterns: tuple[str, ...]) -> list[Redacted | None]:
    """Each text's redaction (None: no secret), scanning together only the texts not seen before."""
    global _kept_chars
    keys = [(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest(), allow_patterns)
            for text in texts]
    results: list[Redacted | None] = [None] * len(texts)
    unseen: list[int] = []
    for index, key in enumerate(keys):
        if key in _seen:
            _seen.move_to_end(key)
            results[index] = _seen[key]
        else:
            unseen.append(index)
    if not unseen:
        return results
    fresh = redact_texts([texts[i] for i in unseen], load_rules(), _allow_patterns(allow_patterns))
    for index, result in zip(unseen, fresh, strict=True):
        results[index] = result
        if keys[index] not in _seen:  # the same text twice in one request is kept once
            _seen[keys[index]] = result
            _kept_chars += len(result.text) if result is not None else 0
    while _seen and (len(_seen) > _SEEN_TEXTS or _kept_chars > _KEPT_REDACTED_CHARS):
        _, dropped = _seen.popitem(last=False)
        _kept_chars -= len(dropped.text) if dropped is not None else 0
    return results


def forget_texts() -> None:
    """Forget every text read (tests and benchmarks that measure a first reading)."""
    global _kept_chars
    _seen.clear()
    _kept_chars = 0


_allow_cache: dict[tuple[str, ...], tuple[object, ...]] = {}


def _allow_patterns(patterns: tuple[str, ...]) -> tuple[object, ...]:
    compiled = _allow_cache.get(patterns)
    if compiled is None:
        if len(_allow_cache) > 64:
            _allow_cache.clear()
        compiled = _allow_cache[patterns] = tuple(compile_pattern(p) for p in patterns)
    return compiled


def _put(item: Any, place: _Text, text: str) -> None:
    target = item
    for step in place.path[:-1]:
        target = target[step]
    last = place.path[-1]
    if place.span is not None:
        whole = target[last]
        text = whole[:place.span[0]] + text + whole[place.span[1]:]
    target[last] = text


def _texts(route: str, conversation: list[Any]) -> Iterator[_Text]:
    texts: list[_Text] = []
    for index, turn in enumerate(conversation):
        if not isinstance(turn, dict):
            continue
        if route == "chat":
            texts += _chat_turn(index, turn)
        elif route == "responses":
            texts += _responses_item(index, turn)
        else:
            texts += _messages_turn(index, turn)
    # Inlined files of one string are replaced from the last to the first, so each span stays where it was found.
    texts.sort(key=lambda t: (t.item, t.path, -(t.span[0] if t.span else 0)))
    return iter(texts)


def _chat_turn(index: int, turn: dict[str, Any]) -> list[_Text]:
    role = turn.get("role")
    if role in ("tool", "function"):
        call = turn.get("tool_call_id") or turn.get("name") or f"{role}#{index}"
        return list(_strings(index, turn.get("content"), ("content",), str(call)))
    if role == "user":
        return list(_inlined(index, turn.get("content"), ("content",), f"user#{index}"))
    return []


def _responses_item(index: int, item: dict[str, Any]) -> list[_Text]:
    kind = item.get("type")
    call = str(item.get("call_id") or item.get("id") or f"{kind}#{index}")
    if isinstance(kind, str) and kind.endswith("_output"):
        return [t for name, value in item.items() if name not in _NOT_TEXT
                for t in _strings(index, value, (name,), call)]
    if kind == "mcp_call":
        return list(_strings(index, item.get("output"), ("output",), call))
    if item.get("role") == "user" and kind in (None, "message"):
        return list(_inlined(index, item.get("content"), ("content",), f"user#{index}"))
    return []


def _messages_turn(index: int, turn: dict[str, Any]) -> list[_Text]:
    if turn.get("role") != "user":
        return []
    content = turn.get("content")
    if not isinstance(content, list):
        return list(_inlined(index, content, ("content",), f"user#{index}"))
    texts: list[_Text] = []
    for position, block in enumerate(content):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        path = ("content", position)
        if isinstance(kind, str) and kind.endswith("tool_result"):
            call = str(block.get("tool_use_id") or f"{kind}#{index}.{position}")
            texts += [t for name, value in block.items() if name not in _NOT_TEXT
                      for t in _strings(index, value, (*path, name), call)]
        elif kind == "document" and isinstance(block.get("source"), dict) and block["source"].get("type") == "text":
            texts += _strings(index, block["source"].get("data"), (*path, "source", "data"), f"document#{index}")
        elif kind == "text":
            texts += _inlined(index, block.get("text"), (*path, "text"), f"user#{index}")
    return texts


def _strings(index: int, value: Any, path: tuple[Any, ...], call: str) -> Iterator[_Text]:
    """Every string inside a tool's result but its ids, names and images."""
    if isinstance(value, str):
        if not (value.startswith("data:") and ";base64," in value[:100]):
            yield _Text(index, path, None, call, value)
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from _strings(index, item, (*path, position), call)
    elif isinstance(value, dict):
        if value.get("type") in _IMAGE_TYPES or (value.get("type") == "base64" and "data" in value):
            return
        for name, item in value.items():
            if name not in _NOT_TEXT:
                yield from _strings(index, item, (*path, name), call)


def _inlined(index: int, value: Any, path: tuple[Any, ...], call: str) -> Iterator[_Text]:
    """The files a client inlined into a user turn: fenced blocks and file elements of its text."""
    if isinstance(value, list):
        for position, part in enumerate(value):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield from _inlined(index, part["text"], (*path, position, "text"), call)
        return
    if not isinstance(value, str) or ("```" not in value and "~~~" not in value and "<file" not in value):
        return
    for match in _INLINED.finditer(value):
        group = 2 if match.group(2) is not None else 4
        start, end = match.span(group)
        if end > start:
            yield _Text(index, path, (start, end), call, value[start:end])
