"""Qwen3-Coder XML calls in content, read the way vLLM's `qwen3_coder` parser reads them.

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

As in vLLM: a function runs from `<function=` to the first `</function>` (or the end of its
block); its name is the text before the first `>`; a parameter runs from `<parameter=` to the
first `</parameter>`, the next `<parameter=`, or the end of the function (so a missing
`</parameter>` is tolerated); one leading and one trailing newline of a value are dropped and
every other character is kept; a repeated parameter keeps its first position and its last value;
values are typed from the tool's schema (`proxy.toolcalls.schema`). vLLM's regexes end an
unclosed block or value at `$`, which stops before a final newline; that quirk is kept so both
read the same arguments.

Where vLLM gives up on the whole response (a name or parameter without `>`), only that call is
reported, as malformed, with its raw text; names are also refused when they contain whitespace
or `<` (vLLM would pass such garbage on as a name or key).
"""

from __future__ import annotations

import re
from typing import ClassVar

from proxy.toolcalls.base import Schemas, ToolCall, dumps
from proxy.toolcalls.scanner import TOOL_CALL_END, TOOL_CALL_START, ContentFormat
from proxy.toolcalls.schema import convert_param_value, parameter_properties

__all__ = ["Qwen3CoderFormat", "parse_function"]

FUNCTION_START = "<function="
FUNCTION_END = "</function>"
PARAMETER_START = "<parameter="
PARAMETER_END = "</parameter>"
SOURCE = "qwen3_coder"
_NOT_IN_NAME = re.compile(r"[\s<]")  # \s: every Unicode space, as str.isspace() sees them


class Qwen3CoderFormat(ContentFormat):
    name: ClassVar[str] = SOURCE
    bare_tag: ClassVar[str | None] = FUNCTION_START
    # A bare call also ends at `</tool_call>`: a stray closer must not swallow the rest of the text.
    bare_closers: ClassVar[tuple[str, ...]] = (FUNCTION_END, TOOL_CALL_END)

    def claims(self, body: str) -> bool:
        # The catch-all, asked after the formats with a stricter mark (Hermes' JSON): a block
        # nobody else reads is reported as a malformed call of this format, never dropped.
        return True

    def parse_block(self, body: str, *, closed: bool, schemas: Schemas) -> list[ToolCall]:
        if FUNCTION_START not in body:
            raw = TOOL_CALL_START + body + (TOOL_CALL_END if closed else "")
            return [_malformed("", raw, "tool call block holds no <function=...> call")]
        if not closed and body.endswith("\n"):
            body = body[:-1]  # vLLM's `<tool_call>(.*?)$` stops before a final newline
        calls: list[ToolCall] = []
        pos = 0
        while (start := body.find(FUNCTION_START, pos)) >= 0:
            inner_start = start + len(FUNCTION_START)
            end = body.find(FUNCTION_END, inner_start)
            if end < 0:
                inner, raw, pos = body[inner_start:], body[start:], len(body)
            else:
                pos = end + len(FUNCTION_END)
                inner, raw = body[inner_start:end], body[start:pos]
            calls.append(parse_function(inner, raw, schemas))
        return calls

    def parse_bare(self, body: str, *, closer: str | None, schemas: Schemas) -> list[ToolCall]:
        raw = FUNCTION_START + body + (FUNCTION_END if closer == FUNCTION_END else "")
        return [parse_function(body, raw, schemas)]


def parse_function(inner: str, raw: str, schemas: Schemas) -> ToolCall:
    """One function: `inner` is the text between `<function=` and `</function>` (or its end)."""
    gt = inner.find(">")
    if gt < 0:
        return _malformed("", raw, "function name is not closed by '>'")
    name = inner[:gt]
    if not _is_name(name):
        return _malformed("", raw, f"bad function name {name[:80]!r}")
    properties = parameter_properties(schemas, name)
    text = inner[gt + 1 :]
    # vLLM's parameter regex may end a value at `$`, which matches before a final newline.
    text_end = len(text) - 1 if text.endswith("\n") else len(text)
    arguments: dict[str, object] = {}
    pos = 0
    while (start := text.find(PARAMETER_START, pos)) >= 0:
        # The value runs to the first of `</parameter>`, the next `<parameter=`, or the end.
        value_start = start + len(PARAMETER_START)
        stop = pos = text_end
        closing = text.find(PARAMETER_END, value_start, text_end)
        if closing >= 0:
            stop, pos = closing, closing + len(PARAMETER_END)
        following = text.find(PARAMETER_START, value_start, stop)
        if following >= 0:
            stop = pos = following
        segment = text[value_start:stop]
        gt = segment.find(">")
        if gt < 0:
            return _malformed(name, raw, f"parameter {segment[:40]!r} is not closed by '>'")
        key = segment[:gt]
        if not _is_name(key):
            return _malformed(name, raw, f"bad parameter name {key[:80]!r}")
        value = segment[gt + 1 :]
        if value.startswith("\n"):
            value = value[1:]
        if value.endswith("\n"):
            value = value[:-1]
        arguments[key] = convert_param_value(value, key, properties)
    try:
        arguments_text = dumps(arguments)
    except (ValueError, RecursionError):  # a value nested deeper than the encoder goes
        return _malformed(name, raw, "arguments cannot be encoded as JSON")
    return ToolCall(name=name, arguments_text=arguments_text, arguments=arguments, source=SOURCE, raw=raw)


def _is_name(name: str) -> bool:
    return bool(name) and _NOT_IN_NAME.search(name) is None


def _malformed(name: str, raw: str, error: str) -> ToolCall:
    return ToolCall(name=name, arguments_text=raw, arguments=None, source=SOURCE, error=error, raw=raw)
