"""The body sent upstream, edited in the client's own bytes.

A retry re-sends the conversation with the proxy's assistant/tool turns appended, and a streamed request gets
`stream_options.include_usage` added. Re-serialising the whole parsed payload would re-send every message the
client wrote with other separators and escapes: equal as JSON, different as bytes, which defeats any
byte-level prefix cache or log diff. Here only the top-level members that changed are re-encoded, and the
appended turns are spliced in before the conversation array's closing bracket.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["splice_body", "splice_items"]

_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\n\r"


def _encode(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _skip(text: str, index: int) -> int:
    while index < len(text) and text[index] in _WHITESPACE:
        index += 1
    return index


def _members(text: str) -> list[tuple[str, Any, int, int]] | None:
    """(key, decoded value, value start, value end) of each top-level member, or None when the text is not
    one plain JSON object (or repeats a key, which only a whole re-encode says once)."""
    index = _skip(text, 0)
    if index >= len(text) or text[index] != "{":
        return None
    index = _skip(text, index + 1)
    members: list[tuple[str, Any, int, int]] = []
    seen: set[str] = set()
    if index < len(text) and text[index] == "}":
        return members if _skip(text, index + 1) == len(text) else None
    try:
        while True:
            if text[index] != '"':
                return None
            key, index = json.decoder.scanstring(text, index + 1)  # type: ignore[attr-defined]
            index = _skip(text, index)
            if text[index] != ":":
                return None
            start = _skip(text, index + 1)
            value, end = _DECODER.raw_decode(text, start)
            if key in seen:
                return None
            seen.add(key)
            members.append((key, value, start, end))
            index = _skip(text, end)
            if text[index] == "}":
                return members if _skip(text, index + 1) == len(text) else None
            if text[index] != ",":
                return None
            index = _skip(text, index + 1)
    except (ValueError, IndexError):
        return None


def _same(left: Any, right: Any) -> bool:
    # `True == 1` in Python: the type is compared too, so a rewritten `stream: 1` -> `true` is re-encoded.
    return type(left) is type(right) and left == right


def splice_body(original: bytes, payload: dict[str, Any], append_to: str | None = None,
                history: list[Any] | None = None, extra: list[Any] | None = None) -> bytes | None:
    """The client's bytes with `payload`'s changed top-level members re-encoded, members it added placed at
    the end, and `extra` spliced onto the end of the client's array at `append_to`. Where that member is not
    the client's array as sent (Responses' bare-string `input`), it becomes `history + extra` re-encoded.

    None when that cannot be done in place (a body that is not UTF-8 text of one object, a repeated key, a
    member the proxy removed): the caller re-encodes the whole payload then."""
    try:
        text = original.decode("utf-8")
    except UnicodeDecodeError:
        return None
    members = _members(text)
    if members is None:
        return None
    present = {key for key, *_ in members}
    if not present <= payload.keys() or (extra and append_to not in present):
        return None
    pieces: list[str] = []
    cursor = 0
    for key, value, start, end in members:
        new = payload[key]
        if extra and key == append_to:
            if isinstance(value, list) and _same(value, new):
                close = end - 1  # the array's `]`: the client's items stay as they were sent
                pieces += [text[cursor:close], ", " if value else "", _encode(extra)[1:-1]]
                cursor = close
                continue
            new = list(history if history is not None else new) + extra
        if not _same(value, new):
            pieces += [text[cursor:start], _encode(new)]
            cursor = end
    added = [key for key in payload if key not in present]
    if added:
        closing = text.rindex("}")
        pieces.append(text[cursor:closing])
        cursor = closing
        pieces += [f"{', ' if members or n else ''}{_encode(key)}: {_encode(payload[key])}"
                   for n, key in enumerate(added)]
    pieces.append(text[cursor:])
    return "".join(pieces).encode("utf-8")


def splice_items(original: bytes, key: str, replaced: dict[int, Any]) -> bytes | None:
    """The client's bytes with the items of its top-level array `key` at the positions `replaced` names
    re-encoded as given; every other byte as the client sent it. None where that cannot be done in place (the
    caller re-encodes the payload then)."""
    try:
        text = original.decode("utf-8")
    except UnicodeDecodeError:
        return None
    members = _members(text)
    span = next(((start, end) for name, value, start, end in (members or []) if name == key
                 and isinstance(value, list)), None)
    if span is None:
        return None
    pieces: list[str] = []
    cursor, index, position = span[0] + 1, _skip(text, span[0] + 1), 0
    try:
        while text[index] != "]":
            _, end = _DECODER.raw_decode(text, index)
            if position in replaced:
                pieces += [text[cursor:index], _encode(replaced[position])]
                cursor = end
            position += 1
            index = _skip(text, end)
            if text[index] == ",":
                index = _skip(text, index + 1)
    except (ValueError, IndexError):
        return None
    pieces.append(text[cursor:])
    return (text[:span[0] + 1] + "".join(pieces)).encode("utf-8")
