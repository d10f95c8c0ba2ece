"""vLLM's qwen3_coder whole-text algorithm, restated from its regexes as a test oracle.

vLLM (`Qwen3CoderToolParser.extract_tool_calls`) cuts `<tool_call>` blocks with
`<tool_call>(.*?)</tool_call>|<tool_call>(.*?)$` (the whole text when there are none), functions
with `<function=(.*?)</function>|<function=(.*)$`, parameters with
`<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)`, takes names up to the first
`>` (a function without one is dropped, the others kept), drops one leading and one trailing
newline of a value, and types it from the schema with a single `type` string (an `anyOf` without
`type` is read as an object: json.loads, then literal_eval). Content is the text before the first
`<tool_call>` (or `<function=`).
Any exception fails the whole response: `None` here.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*?)$", re.DOTALL)
FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
PARAMETER = re.compile(r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL)


def _properties(name: str, tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    for tool in tools or []:
        if tool.get("type") == "function" and tool["function"]["name"] == name:
            params = tool["function"].get("parameters")
            if isinstance(params, dict) and "properties" in params:
                return params["properties"]
            return params if isinstance(params, dict) else {}
    return {}


def _convert(value: str, name: str, config: dict[str, Any]) -> Any:
    if value.lower() == "null":
        return None
    if name not in config:
        return value
    declared = config[name]
    if isinstance(declared, dict) and "type" in declared:
        kind = str(declared["type"]).strip().lower()
    elif isinstance(declared, dict) and "anyOf" in declared:
        kind = "object"  # 0.19: "anyOf has no top-level type; treat as object"
    else:
        kind = "string"
    if kind in ("string", "str", "text", "varchar", "char", "enum"):
        return value
    if kind.startswith(("int", "uint", "long", "short", "unsigned")):
        try:
            return int(value)
        except (ValueError, TypeError):
            return value
    if kind.startswith(("num", "float")):
        try:
            number = float(value)
            return number if number - int(number) != 0 else int(number)
        except (ValueError, TypeError):
            return value
    if kind in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, TypeError, ValueError):
            pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError):
        return value


def vllm_extract(text: str, tools: list[dict[str, Any]] | None) -> tuple[str, list[tuple[str, Any]]] | None:
    if "<function=" not in text:
        return text, []
    try:
        blocks = [m[0] if m[0] else m[1] for m in TOOL_CALL.findall(text)] or [text]
        functions = [m[0] if m[0] else m[1] for block in blocks for m in FUNCTION.findall(block)]
        calls = []
        for function in functions:
            end = function.find(">")
            if end < 0:  # 0.19: no ">" after the name drops only this call
                continue
            name = function[:end]
            config = _properties(name, tools)
            arguments = {}
            for match in PARAMETER.findall(function[end + 1 :]):
                gt = match.index(">")
                value = match[gt + 1 :]
                value = value[1:] if value.startswith("\n") else value
                value = value[:-1] if value.endswith("\n") else value
                arguments[match[:gt]] = _convert(value, match[:gt], config)
            arguments = json.loads(json.dumps(arguments))  # vLLM serialises here; a failure fails the response
            calls.append((name, arguments))
    except Exception:
        return None
    start = text.find("<tool_call>")
    return text[: start if start >= 0 else text.find("<function=")], calls
