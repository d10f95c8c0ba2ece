"""Typing XML parameter values from the request's tool schemas, the way vLLM's qwen3_coder does.

XML carries every value as text; vLLM turns it into JSON types using the `parameters` schema of
the tool the request offered. The client sees vLLM's result when the server parses the calls,
so the proxy must reach the same arguments when it parses them itself (a wrong type would both
misjudge the call and hand the client something vLLM would not have).

vLLM's rules for a parameter whose schema has one `type`:
- a value that is "null" (any case) is None, whatever the type, even for unknown parameters;
- unknown parameter, or no `type` -> the raw string;
- string-like types -> raw; int-like -> int(), else raw; number-like -> float (an integral float
  becomes an int), else raw; boolean -> value.lower() == "true" (anything else is False);
- object/array -> json.loads, else ast.literal_eval, else raw; any other type -> literal_eval,
  else raw.
Beyond vLLM (which reads only a single `type` string): a `type` list and `anyOf`/`oneOf` are a
union, tried in schema order, each strictly (a union member that does not fit is skipped); when
none fits the value stays a string. Values that are not strict JSON (NaN, sets, bytes) stay strings.
"""

from __future__ import annotations

import ast
import functools
import json
from typing import Any

from proxy.toolcalls.base import Schemas, loads_strict

__all__ = ["convert_param_value", "parameter_properties", "tool_schemas"]

_STRING_TYPES = frozenset({"string", "str", "text", "varchar", "char", "enum"})
_INT_PREFIXES = ("int", "uint", "long", "short", "unsigned")
_NUMBER_PREFIXES = ("num", "float")
_BOOL_TYPES = frozenset({"boolean", "bool", "binary"})
_JSON_TYPES = frozenset({"object", "array", "arr"})
_JSON_PREFIXES = ("dict", "list")
_FAIL = object()  # a strict conversion that does not fit


def tool_schemas(tools: list[dict[str, Any]] | None) -> Schemas:
    """OpenAI `tools` array -> {function name: parameters JSON schema}; junk entries are skipped."""
    schemas: Schemas = {}
    if not isinstance(tools, list):
        return schemas
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            continue
        function = tool.get("function")
        if not isinstance(function, dict):
            continue
        name = function.get("name")
        if not isinstance(name, str) or not name:
            continue
        parameters = function.get("parameters")
        schemas[name] = parameters if isinstance(parameters, dict) else {}
    return schemas


def parameter_properties(schemas: Schemas, function_name: str) -> dict[str, Any]:
    """The per-parameter schemas of one tool, as vLLM looks them up (`properties`, else the schema)."""
    parameters = schemas.get(function_name)
    if not parameters:
        return {}
    properties = parameters.get("properties")
    if "properties" in parameters:
        return properties if isinstance(properties, dict) else {}
    return parameters


def convert_param_value(value: str, name: str, properties: dict[str, Any]) -> Any:
    """One XML parameter value typed by its schema (see the module docstring for the rules)."""
    if value.lower() == "null":
        return None
    schema = properties.get(name)
    if name not in properties:
        return value
    if not isinstance(schema, dict):
        return value
    declared = schema.get("type")
    if isinstance(declared, str):
        return _convert_single(value, _kind(declared))
    kinds = [_kind(t) for t in _union_types(schema)]
    if not kinds:
        return value
    for kind in kinds:
        converted = _convert_strict(value, kind)
        if converted is not _FAIL:
            return converted
    return value


@functools.lru_cache(maxsize=256)  # a handful of type names, looked up for every value
def _kind(type_name: Any) -> str:
    t = str(type_name).strip().lower()
    if t in _STRING_TYPES:
        return "string"
    if t.startswith(_INT_PREFIXES):
        return "integer"
    if t.startswith(_NUMBER_PREFIXES):
        return "number"
    if t in _BOOL_TYPES:
        return "boolean"
    if t in _JSON_TYPES or t.startswith(_JSON_PREFIXES):
        return "array" if t in ("array", "arr") or t.startswith("list") else "object"
    if t == "null":
        return "null"
    return "other"


def _union_types(schema: dict[str, Any], depth: int = 0) -> list[str]:
    """Type names of a `type` list or `anyOf`/`oneOf` members, in schema order."""
    if depth > 8:  # a self-referencing schema must not recurse forever
        return []
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    found: list[str] = []
    for key in ("anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list):
            for member in members:
                if isinstance(member, dict):
                    found.extend(_union_types(member, depth + 1))
    return found


def _convert_single(value: str, kind: str) -> Any:
    """vLLM's lenient conversion for a schema with one type: failures degrade, never raise."""
    if kind == "string":
        return value
    if kind in ("integer", "number"):
        converted = _convert_strict(value, kind)
        return value if converted is _FAIL else converted
    if kind == "boolean":
        return value.lower() == "true"
    if kind in ("object", "array"):
        try:
            return loads_strict(value)
        except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
            pass
    return _literal(value)


def _convert_strict(value: str, kind: str) -> Any:
    """A union member's conversion: the value either fits this type or the member is skipped."""
    if kind == "string":
        return value
    if kind == "integer":
        try:
            return int(value)
        except ValueError:
            return _FAIL
    if kind == "number":
        try:
            number = float(value)
            # vLLM hands an integral float back as an int ("5.0" -> 5).
            return int(number) if number == int(number) else number
        except (ValueError, OverflowError):  # "abc", "nan" (int(nan)), "inf" (int(inf))
            return _FAIL
    if kind == "boolean":
        lowered = value.lower()
        return lowered == "true" if lowered in ("true", "false") else _FAIL
    if kind in ("object", "array"):
        wanted = dict if kind == "object" else list
        try:
            parsed = loads_strict(value)
        except (ValueError, RecursionError):
            parsed = _literal(value)
        return parsed if isinstance(parsed, wanted) else _FAIL
    return _FAIL


def _literal(value: str) -> Any:
    """ast.literal_eval as vLLM's last resort, kept only if the result is strict JSON."""
    try:
        result = ast.literal_eval(value)
        # Round-trip so tuples become lists and sets, bytes or NaN fall back to the string.
        return json.loads(json.dumps(result, allow_nan=False))
    except Exception:  # literal_eval raises many kinds (SyntaxError, MemoryError, RecursionError ...)
        return value
