"""Reading a streamed text chunk without parsing all of it.

Within one upstream stream, vLLM's plain text chunks of one field (`content`, or the model's thinking in
`reasoning` / `reasoning_content`) differ only in the text: the id, model,
creation time, index and the nulls around the delta repeat byte for byte. Once one such chunk is
parsed, its bytes before and after the text are the frame; a later chunk with the same frame holds
exactly one JSON string in between, and decoding that string alone gives what parsing the whole
chunk would have given. Only the canonical spelling of that string is read this way (proxy/strict.py), so
a chunk read through the frame of a canonical chunk is itself canonical.
Anything else (another field, a finish reason, usage, escapes that do not
decode to one string) does not match and is parsed in full.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.strict import dumps

__all__ = ["TextFrame"]

_FIELDS = ("content", "reasoning", "reasoning_content")


class TextFrame:
    """The bytes around `choices[0].delta.<field>` of one stream's plain text chunks of that field."""

    __slots__ = ("_cut", "_prefix", "_suffix", "field", "head", "index", "tail")

    def __init__(self, prefix: str, suffix: str, index: Any, field: str = "content") -> None:
        self._prefix = prefix
        self._suffix = suffix
        self._cut = len(prefix) + len(suffix)
        self.index = index
        self.field = field
        # The whole event's bytes around the string's characters (quotes included), for `plain_text`.
        self.head = b"data: " + prefix.encode() + b'"'
        self.tail = b'"' + suffix.encode() + b"\n\n"

    @classmethod
    def learn(cls, data: str, obj: dict[str, Any]) -> TextFrame | None:
        """The frame of `data`, whose parse is `obj`, when it is a plain text chunk; else None."""
        choices = obj.get("choices")
        if "error" in obj or obj.get("usage") or not isinstance(choices, list) or len(choices) != 1:
            return None
        choice = choices[0]
        if not isinstance(choice, dict) or choice.get("finish_reason"):
            return None
        delta = choice.get("delta")
        if not isinstance(delta, dict) or len(delta) != 1:
            return None
        field = next(iter(delta))
        if field not in _FIELDS or not isinstance(delta[field], str):
            return None
        opener = f'"delta":{{"{field}":'
        # The text as the upstream wrote it is one of the usual spellings, or no frame is learnt.
        for literal in (json.dumps(delta[field], ensure_ascii=False), json.dumps(delta[field])):
            marker = opener + literal + "}"
            if data.count(marker) == 1:
                at = data.index(marker) + len(opener)
                return cls(data[:at], data[at + len(literal):], choice.get("index", 0), field)
        return None

    def plain_text(self, raw: bytes) -> str | None:
        """The chunk's text when `raw`, one whole event as read, is this frame around a string with nothing
        escaped and no control character (the bulk of a stream); else None (`text` reads the rest). Read from the
        bytes alone: the cheapest reading of an event that the frame allows."""
        head, tail = self.head, self.tail
        if len(raw) <= len(head) + len(tail) or not raw.startswith(head) or not raw.endswith(tail):
            return None
        inner = raw[len(head):len(raw) - len(tail)]
        if b'"' in inner or b"\\" in inner:
            return None
        try:
            text = inner.decode()
        except UnicodeDecodeError:
            return None
        return text if text.isprintable() else None

    def text(self, data: str) -> str | None:
        """The chunk's text when `data` is this frame around one JSON string; else None."""
        if len(data) <= self._cut or not data.startswith(self._prefix) or not data.endswith(self._suffix):
            return None
        literal = data[len(self._prefix): len(data) - len(self._suffix)]
        if literal[0] != '"':
            return None
        inner = literal[1:-1]
        if len(literal) > 1 and literal[-1] == '"' and '"' not in inner and "\\" not in inner and inner.isprintable():
            return inner  # nothing escaped and no control character: the JSON string is its own text
        try:
            value = json.loads(literal)
        except ValueError:
            return None
        # Only the canonical spelling of the string: then the chunk's bytes are the proxy's own encoding of
        # what it read, which enforce mode may forward as they are.
        return value if isinstance(value, str) and dumps(value) == literal else None
