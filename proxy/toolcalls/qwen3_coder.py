"""Qwen3-Coder XML calls in content, read the way the upstream's vLLM version reads them.

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

How a version family cuts functions and values and types them is data (`XmlRules`, chosen in
`proxy.toolcalls.families`); this module reads its fields. Common to all: a function runs from
`<function=` to the first `</function>` (or the end of its block); a block may hold several;
a repeated parameter keeps its first position and its last value.

The `regex` and `expat` engines (0.19/0.23): the name is the text before the first `>`; a value
runs to the first `</parameter>`, the next `<parameter=`, or the end of the function (a missing
`</parameter>` is tolerated); one leading and one trailing newline are dropped. vLLM's regexes end
an unclosed block or value at `$`, which stops before a final newline; that quirk is kept.
The `engine` (0.24+): the name is the text before `>` (or before a closing tag), stripped; a value
must be closed by `</parameter>` or the next `<parameter=` (tags may hold spaces), else it is
dropped; values are stripped (0.24.0) or lose one newline each side (0.34).

Where vLLM loses a call or the whole response (a name or parameter without `>`, a value it cannot
type or write as JSON, an empty name), that one call is reported, as malformed, with its raw
text; names are also refused when they contain whitespace or `<` (vLLM would pass such garbage on
as a name or key).
"""

from __future__ import annotations

import re
from typing import ClassVar

from proxy.toolcalls.base import Schemas, ToolCall, dumps
from proxy.toolcalls.families import DEFAULT_RULES, XmlRules
from proxy.toolcalls.scanner import TOOL_CALL_END, TOOL_CALL_START, ContentFormat
from proxy.toolcalls.value_types import CallFails, expat_keeps_raw, properties_for, type_value

__all__ = ["Qwen3CoderFormat", "parse_function"]

FUNCTION_START = "<function="
FUNCTION_END = "</function>"
PARAMETER_START = "<parameter="
PARAMETER_END = "</parameter>"
SOURCE = "qwen3_coder"
_NOT_IN_NAME = re.compile(r"[\s<]")  # \s: every Unicode space, as str.isspace() sees them
# The 0.24+ engine's parameter grammar: spaces allowed inside the tags, a value closed by its end
# tag or the next opener (never by the end of the text).
_ENGINE_PARAM = re.compile(
    r"<\s*parameter\s*=\s*([^>]*)>(.*?)(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s*=))", re.DOTALL
)


class Qwen3CoderFormat(ContentFormat):
    name: ClassVar[str] = SOURCE
    # The catch-all for `<tool_call>` blocks: asked after the formats with a stricter mark.
    priority: ClassVar[int] = 10
    openers: ClassVar[tuple[str, ...]] = (TOOL_CALL_START, FUNCTION_START)
    # A bare call also ends at `</tool_call>`: a stray closer must not swallow the rest of the text.
    bare_closers: tuple[str, ...] = (FUNCTION_END, TOOL_CALL_END)

    def __init__(self, rules: XmlRules = DEFAULT_RULES) -> None:
        self.rules = rules
        if rules.engine == "engine":
            # The engine reads `</tool_call>` inside a function as text: only `</function>` ends it.
            self.bare_closers = (FUNCTION_END,)

    def for_rules(self, rules: XmlRules) -> Qwen3CoderFormat:
        return self if rules == self.rules else Qwen3CoderFormat(rules)

    def block_closes(self, body: str) -> bool:
        if self.rules.engine != "engine":
            return True
        return body.rfind(FUNCTION_START) <= body.rfind(FUNCTION_END)

    def claims(self, body: str) -> bool:
        # The catch-all, asked after the formats with a stricter mark (Hermes' JSON): a block
        # nobody else reads is reported as a malformed call of this format, never dropped.
        return True

    def parse_block(self, body: str, *, closed: bool, schemas: Schemas) -> list[ToolCall]:
        if FUNCTION_START not in body:
            raw = TOOL_CALL_START + body + (TOOL_CALL_END if closed else "")
            return [_malformed("", raw, "tool call block holds no <function=...> call")]
        rules = self.rules
        if rules.engine == "expat" and body.count(FUNCTION_START) > 1:
            # qwen3_xml 0.19/0.23 merge every function of a block into one call whose arguments
            # are not JSON (`{"a": "1"}, "b": "2"}`): reported as one malformed call.
            raw = TOOL_CALL_START + body + (TOOL_CALL_END if closed else "")
            return [_malformed("", raw, "vLLM's qwen3_xml cannot read two functions in one <tool_call>")]
        if not closed and body.endswith("\n") and rules.engine != "engine":
            body = body[:-1]  # vLLM's `<tool_call>(.*?)$` stops before a final newline
        calls: list[ToolCall] = []
        pos = 0
        while (start := body.find(FUNCTION_START, pos)) >= 0:
            inner_start = start + len(FUNCTION_START)
            end = _function_end(body, inner_start, rules)
            if end < 0:
                inner, raw, pos = body[inner_start:], body[start:], len(body)
            elif body.startswith(FUNCTION_END, end):
                pos = end + len(FUNCTION_END)
                inner, raw = body[inner_start:end], body[start:pos]
            else:  # a nested `<function=` starts the next call
                inner, raw, pos = body[inner_start:end], body[start:end], end
            calls.append(parse_function(inner, raw, schemas, rules))
        return calls

    def parse_bare(self, body: str, *, closer: str | None, schemas: Schemas) -> list[ToolCall]:
        if self.rules.split_nested_function and FUNCTION_START in body:
            # A stray `<function=` inside a bare call starts another call, as in a block.
            whole = FUNCTION_START + body + (FUNCTION_END if closer == FUNCTION_END else "")
            return self.parse_block(whole, closed=True, schemas=schemas)
        raw = FUNCTION_START + body + (FUNCTION_END if closer == FUNCTION_END else "")
        return [parse_function(body, raw, schemas, self.rules)]


def _function_end(body: str, inner_start: int, rules: XmlRules) -> int:
    """Where the function starting at `inner_start` ends: its `</function>`, or (where the family
    splits them) the next `<function=`; -1 for the end of the block."""
    end = body.find(FUNCTION_END, inner_start)
    if rules.split_nested_function:
        nested = body.find(FUNCTION_START, inner_start)
        if nested >= 0 and (end < 0 or nested < end):
            return nested
    return end


def parse_function(inner: str, raw: str, schemas: Schemas, rules: XmlRules = DEFAULT_RULES) -> ToolCall:
    """One function: `inner` is the text between `<function=` and its end."""
    if rules.engine == "engine":
        return _parse_engine(inner, raw, schemas, rules)
    return _parse_regex(inner, raw, schemas, rules)


def _parse_regex(inner: str, raw: str, schemas: Schemas, rules: XmlRules) -> ToolCall:
    """The 0.19/0.23 regexes (and the value bounds the expat parser shares with them)."""
    gt = inner.find(">")
    if gt < 0:
        return _malformed("", raw, "function name is not closed by '>'")
    name = inner[:gt]
    if not _is_name(name):
        return _malformed("", raw, f"bad function name {name[:80]!r}")
    text = inner[gt + 1 :]
    # vLLM's parameter regex may end a value at `$`, which matches before a final newline.
    text_end = len(text) - 1 if text.endswith("\n") else len(text)
    properties = properties_for(schemas, name, rules) if rules.engine == "expat" else {}
    arguments: dict[str, str] = {}
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
        if gt < 0 and rules.engine == "expat":
            continue  # qwen3_xml drops a parameter whose name has no `>`
        if gt < 0:
            return _malformed(name, raw, f"parameter {segment[:40]!r} is not closed by '>'")
        if rules.engine == "expat" and stop == text_end and not raw.endswith(FUNCTION_END):
            # The text ends inside this value: qwen3_xml leaves its JSON string unterminated.
            return _malformed(name, raw, "vLLM's qwen3_xml leaves an unclosed final value unterminated")
        key = segment[:gt]
        if not _is_name(key):
            return _malformed(name, raw, f"bad parameter name {key[:80]!r}")
        value = segment[gt + 1 :]
        if rules.engine == "expat" and expat_keeps_raw(value, key, properties):
            arguments[key] = value  # qwen3_xml defers these and reads the raw text, newlines and all
            continue
        if rules.value_ends_at_tool_call and (cut := value.find(TOOL_CALL_START)) >= 0:
            value = value[:cut]  # qwen3_xml's pre-parser closes the value at a `<tool_call>`
        value = value.removeprefix("\n")
        arguments[key] = value[:-1] if value.endswith("\n") else value
    if rules.engine == "expat" and not raw.endswith(FUNCTION_END):
        return _malformed(name, raw, "vLLM's qwen3_xml leaves the arguments of an unclosed function unterminated")
    return _typed_call(name, raw, arguments, schemas, rules)


def _parse_engine(inner: str, raw: str, schemas: Schemas, rules: XmlRules) -> ToolCall:
    """The 0.24+ state machine's reading of one function."""
    gt = inner.find(">")
    cut = min((i for tag in rules.name_closers if (i := inner.find(tag)) >= 0), default=-1)
    if cut >= 0 and (gt < 0 or cut < gt):
        name, body = inner[:cut].strip(), ""  # the name's state ends at a closing tag: no arguments
    elif gt >= 0:
        name, body = inner[:gt].strip(), inner[gt + 1 :]
    else:
        name, body = inner.strip(), ""
    if not name:
        return _malformed("", raw, "function has no name (vLLM drops this call)")
    if not _is_name(name):
        return _malformed("", raw, f"bad function name {name[:80]!r}")
    arguments: dict[str, str] = {}
    for match in _ENGINE_PARAM.finditer(body):
        key, value = match.group(1), match.group(2)
        if rules.strip_values:
            value = value.strip()
        else:
            value = value.removeprefix("\n")
            value = value[:-1] if value.endswith("\n") else value
        arguments[key] = value
    return _typed_call(name, raw, arguments, schemas, rules)


def _typed_call(name: str, raw: str, values: dict[str, str], schemas: Schemas, rules: XmlRules) -> ToolCall:
    """The call with its values (already cut and trimmed) typed as the family types them."""
    properties = properties_for(schemas, name, rules)
    arguments: dict[str, object] = {}
    for key, value in values.items():
        try:
            arguments[key] = type_value(value, key, properties, rules)
        except CallFails as exc:
            return _malformed(name, raw, f"parameter {key!r}: {exc}")
    try:
        arguments_text = dumps(arguments)
    except (ValueError, RecursionError):  # a value nested deeper than the encoder goes
        return _malformed(name, raw, "arguments cannot be encoded as JSON")
    return ToolCall(name=name, arguments_text=arguments_text, arguments=arguments, source=SOURCE, raw=raw)


def _is_name(name: str) -> bool:
    return bool(name) and _NOT_IN_NAME.search(name) is None


def _malformed(name: str, raw: str, error: str) -> ToolCall:
    return ToolCall(name=name, arguments_text=raw, arguments=None, source=SOURCE, error=error, raw=raw)
