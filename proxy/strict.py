"""The one strict JSON decoder for upstream output, and the one canonical encoder of what the client gets.

A lenient client and the proxy must never read one byte string as two different objects. So in enforce
mode the proxy decodes the upstream's JSON strictly, judges the objects, and encodes what the client gets
itself. The decoder refuses what parsers disagree on or choke on: invalid UTF-8, a byte-order mark,
NaN / Infinity, numbers too long to read the same everywhere (Python refuses integers over 4300 digits,
JavaScript rounds them), floats that overflow, nesting deeper than any real chunk, a key written twice in
one object (first-key-wins and last-key-wins readers disagree), an unpaired surrogate escape. The encoder writes
compact JSON whose only non-ASCII characters are ones no line splitter breaks on: U+0085, U+2028 and
U+2029 (which `str.splitlines` and some SSE readers take as line ends) are escaped.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_EXACT_INT", "MAX_NUMBER_CHARS", "Unparseable", "dumps", "encode_event", "loads",
           "lone_surrogate", "unique_object"]

MAX_NUMBER_CHARS = 40  # digits of a token id or a timestamp fit many times over
MAX_EXACT_INT = 2**53  # JavaScript reads a larger integer (a tool call's index, say) as another number
MAX_DEPTH = 64  # a vLLM chunk nests 6 deep; tool arguments are a string inside it


class Unparseable(ValueError):
    """Upstream output that the proxy refuses to read (and so never relays in enforce mode)."""


def _int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise Unparseable(f"a number of {len(text)} characters (limit {MAX_NUMBER_CHARS})")
    number = int(text)
    if abs(number) > MAX_EXACT_INT:
        raise Unparseable(f"the integer {text} is beyond 2**53, where JavaScript readers round it")
    return number


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise Unparseable(f"a number of {len(text)} characters (limit {MAX_NUMBER_CHARS})")
    number = float(text)
    if math.isinf(number):
        raise Unparseable(f"{text} overflows a float")
    return number


def _constant(name: str) -> Any:
    raise Unparseable(f"{name} is not JSON")


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object hook that refuses a key written twice: Python keeps the last value, yyjson / simdjson and
    others the first, so such an object means two different things to the proxy and to a client."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _v in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise Unparseable(f"the key {twice[:80]!r} appears twice in one object")
    return obj


# `\uD800`-`\uDFFF` escapes: a pair is one character to everyone; a lone one is read three ways (JavaScript
# keeps it, Python keeps it and cannot encode it, Rust and Go replace or refuse it).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def lone_surrogate(text: str, value: Any) -> bool:
    """True when `value`, decoded from the JSON `text`, holds a string with an unpaired surrogate."""
    # Two substring searches: several times faster than the pattern over a body of a few hundred KB.
    if ("\\ud" not in text and "\\uD" not in text) or not _SURROGATE_ESCAPE.search(text):
        return False
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


_DECODER = json.JSONDecoder(parse_int=_int, parse_float=_float, parse_constant=_constant,
                            object_pairs_hook=unique_object)
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_EVENT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_LINE_BREAKERS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def loads(data: str | bytes) -> Any:
    """The JSON value of `data`, or Unparseable saying why not."""
    if isinstance(data, bytes | bytearray):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Unparseable(f"invalid UTF-8 at byte {exc.start}") from None
    if data[:1] == "\ufeff":
        raise Unparseable("a byte-order mark before the JSON")
    try:
        value = _DECODER.decode(data)
    except Unparseable:
        raise
    except RecursionError:
        raise Unparseable("nested too deep") from None
    except ValueError as exc:  # JSONDecodeError, and int() over Python's digit limit
        raise Unparseable(str(exc)[:200]) from None
    # Every level of nesting costs one bracket, so a text with few brackets cannot nest deep.
    if (data.count("{") + data.count("[")) > MAX_DEPTH and _depth(value) > MAX_DEPTH:
        raise Unparseable(f"nested deeper than {MAX_DEPTH}")
    if lone_surrogate(data, value):
        raise Unparseable("a string holds an unpaired UTF-16 surrogate escape")
    return value


def _depth(value: Any) -> int:
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in node if isinstance(child, dict | list))
    return deepest


def dumps(obj: Any) -> str:
    """The canonical encoding: compact, UTF-8 text as is, line-breaking characters escaped."""
    text = _ENCODER.encode(obj)
    if not text.isascii() and ("\x85" in text or "\u2028" in text or "\u2029" in text):
        text = text.translate(_LINE_BREAKERS)  # only string contents hold non-ASCII characters
    return text


def encode_event(obj: Any, event: str | None = None) -> bytes:
    """One server-sent event carrying `obj`, framed the one way every reader agrees on."""
    data = b"data: " + dumps(obj).encode() + b"\n\n"
    if event is None:
        return data
    if not _EVENT_NAME.fullmatch(event):
        raise Unparseable(f"an event name the proxy does not write: {event[:80]!r}")
    return b"event: " + event.encode() + b"\n" + data
