"""DSPy ReAct's actions: the tool it runs is named in fields of the answer, not offered as a tool.

Each step, ReAct asks for three output fields, `next_thought`, `next_tool_name` and `next_tool_args`, written as its
adapter says: the ChatAdapter's `[[ ## FIELD ## ]]` sections (`DSPyChatFields`) or the JSONAdapter's one JSON object
(`DSPyJsonFields`). Its tools (the program's own functions, and `finish`) are declared in its system prompt, one line
each: `(N) NAME, whose description is <desc>...</desc>. It takes arguments {...}.` (a Python dict of JSON schemas;
`declared_tools`). An action is a call of NAME with the arguments object, judged as the tool its declared schema
describes.

Read as DSPy 3.4 reads an answer (dspy/adapters/chat_adapter.py `parse`, json_adapter.py `parse`, utils.py
`parse_value`): the sections split at lines whose stripped text starts with a header, the rest of the header's line
(cut where DSPy cuts it) and the lines up to the next header as its value, stripped, the first section of a field
kept; the tool's name as `parse_value` resolves a `Literal` (the value, or it stripped of a `Literal[...]` wrapper and
one pair of quotes). Where DSPy is lenient the proxy is not: DSPy repairs arguments that are not JSON (json_repair,
then `ast.literal_eval`), takes a name json_repair can make of other text, and finds a JSON object anywhere in a JSON
answer. A step whose name or arguments are not read exactly this way, or a JSON answer that is not one JSON object
yet names an action field, is refused as unjudgeable (the model is asked again), never read one way.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import Any

from proxy.strict import Unparseable, loads
from proxy.toolcalls.text_actions import NO_CONTEXT, Stated, TextActionFormat, TextActions, text_call

__all__ = ["DSPyChatFields", "DSPyJsonFields", "declared_tools", "trajectory_steps"]

_HEADER = re.compile(r"\[\[ ## (\w+) ## \]\]")
_NAME, _ARGS, _THOUGHT = "next_tool_name", "next_tool_args", "next_thought"
_OUTPUTS = (_THOUGHT, _NAME, _ARGS)
# `(N) NAME, whose description is <desc>DESC</desc>. It takes arguments ARGS.` (dspy/adapters/types/tool.py
# `Tool.__str__`; the description has its newlines replaced); without a description `(N) NAME. It takes ...`.
_TOOL_LINE = re.compile(r"^\s*\((\d+)\) (.+?)(?:, whose description is <desc>(.*)</desc>\.|\.) It takes arguments "
                        r"(\{.*\})\.\s*$")
_LITERAL = re.compile(r"`next_tool_name` \(Literal\[(.*)\]\)")


def declared_tools(prompt: str) -> tuple[dict[str, Any], ...]:
    """The tools a ReAct prompt declares, as OpenAI function tools (the schema None where its arguments do not read
    as a dict: the call's own arguments decide then)."""
    tools: list[dict[str, Any]] = []
    for line in prompt.splitlines():
        match = _TOOL_LINE.match(line)
        if match is None:
            continue
        name, description, arguments = match.group(2), match.group(3), match.group(4)
        try:
            properties = ast.literal_eval(arguments)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            properties = None
        function: dict[str, Any] = {"name": name}
        if isinstance(properties, dict):
            # A function of no arguments takes none: anything a call sends is read by itself.
            function["parameters"] = ({"type": "object", "properties": properties} if properties else
                                      {"type": "object", "properties": {}, "additionalProperties": False})
        if description:
            function["description"] = description
        tools.append({"type": "function", "function": function})
    if not tools:  # the tool lines could not be read: the names its `Literal` lists, schemas unknown
        found = _LITERAL.search(prompt)
        try:
            names = ast.literal_eval(f"[{found.group(1)}]") if found else []
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            names = []
        tools = [{"type": "function", "function": {"name": n}} for n in names if isinstance(n, str)]
    return tuple(tools)


def _names(stated: Stated) -> tuple[str, ...]:
    return tuple(t["function"]["name"] for t in stated.tools)


def chat_sections(text: str) -> dict[str, str]:
    """The output fields of a ChatAdapter answer, as `ChatAdapter.parse` splits them (before each is parsed): the
    first section of each name kept."""
    sections: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in text.splitlines():
        match = _HEADER.match(line.strip())
        if match:
            # DSPy matches the stripped line but cuts the unstripped one at the match's end: kept as it is.
            rest = line[match.end():].strip()
            sections.append((match.group(1), [rest] if rest else []))
        else:
            sections[-1][1].append(line)
    fields: dict[str, str] = {}
    for name, lines in sections:
        if name is not None and name not in fields:
            fields[name] = "\n".join(lines).strip()
    return fields


def _tool_name(value: Any, names: tuple[str, ...]) -> str | None:
    """`parse_value(value, Literal[names])` where it resolves without json_repair; None otherwise."""
    if value in names:
        return str(value)
    if not isinstance(value, str):
        return None
    v = value.strip()
    if v.startswith(("Literal[", "str[")) and v.endswith("]"):
        v = v[v.find("[") + 1:-1]
    if len(v) > 1 and v[0] == v[-1] and v[0] in "\"'":
        v = v[1:-1]
    return v if v in names else None


def _action(fmt: str, fields: dict[str, Any], stated: Stated, raw: str, found: TextActions) -> None:
    """The call of one step's fields, added to `found`; refused (`error`) where it cannot be read exactly."""
    names = _names(stated)
    name = _tool_name(fields[_NAME], names) if names else None
    arguments = fields.get(_ARGS)
    problems = []
    if isinstance(arguments, str):  # the ChatAdapter's section, or a JSON answer that wrote the object as a string
        try:
            arguments = loads(arguments)
        except Unparseable as exc:
            problems.append(f"`next_tool_args` is not one JSON object ({exc})")
    if not isinstance(arguments, dict):
        if not problems:
            problems.append("`next_tool_args` is not a JSON object")
        arguments = {}
    if name is None:
        problems.append(f"`next_tool_name` {str(fields[_NAME])[:80]!r} is not exactly one of the declared tools "
                        f"({', '.join(names) or 'none read'})")
    call = text_call(fmt, name if name is not None else str(fields[_NAME])[:80], arguments, raw, len(found.calls))
    if problems:
        call.error = "; ".join(problems)
    found.calls.append(call)


class DSPyChatFields(TextActionFormat):
    """ChatAdapter: `[[ ## next_tool_name ## ]]` and `[[ ## next_tool_args ## ]]` sections."""

    name = "dspy_chat"

    def read(self, text: str, stated: Stated = NO_CONTEXT, pieces: Sequence[str] | None = None) -> TextActions:
        found = TextActions()
        fields = chat_sections(text)
        if _NAME in fields:
            if _ARGS not in fields:  # DSPy refuses an answer without every field: nothing runs
                return found
            _action(self.name, fields, stated, text, found)
        return found


class DSPyJsonFields(TextActionFormat):
    """JSONAdapter: one JSON object with `next_tool_name` and `next_tool_args`."""

    name = "dspy_json"

    def read(self, text: str, stated: Stated = NO_CONTEXT, pieces: Sequence[str] | None = None) -> TextActions:
        found = TextActions()
        try:
            fields = loads(text)
        except Unparseable:
            fields = None
        if isinstance(fields, dict):
            if _NAME in fields and _ARGS in fields:
                _action(self.name, fields, stated, text, found)
            return found
        if any(key in text for key in (_NAME, _ARGS)) or "\\u" in text:
            # json_repair finds (and mends) an object anywhere in the text, escapes and all: not read one way.
            call = text_call(self.name, "next_tool_name", {}, text, 0)
            call.error = "a JSON answer that is not exactly one JSON object, yet may name an action"
            found.calls.append(call)
        return found


_STEP = re.compile(r"^(thought|tool_name|tool_args|observation)_(\d+)$")


def trajectory_steps(text: str) -> tuple[list[tuple[str, str, str]], str]:
    """The steps a ReAct request's `trajectory` shows, each (thought, tool name, tool args) as written, and the
    request's other input fields (its question) as one text: what its session is made of. The trajectory is the
    ChatAdapter's rendering, which ReAct uses whatever adapter answers."""
    fields = chat_sections(text)
    steps: dict[int, dict[str, str]] = {}
    inputs: list[str] = []
    for name, value in fields.items():
        match = _STEP.match(name)
        if match:
            steps.setdefault(int(match.group(2)), {})[match.group(1)] = value
        elif name != "trajectory":
            inputs.append(f"{name}\x00{value}")
    ordered = [steps[i] for i in sorted(steps)]
    return ([(s.get("thought", ""), s.get("tool_name", ""), s.get("tool_args", "")) for s in ordered],
            "\x01".join(inputs))
