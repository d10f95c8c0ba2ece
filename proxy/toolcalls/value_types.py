"""Typing an XML parameter value from the tool's schema, as each vLLM version family does.

Three ways, named by `XmlRules.typing`:
- "convert_param_value" (0.19 `qwen3_coder`): `"null"` (any case) is None for every parameter;
  unknown parameters stay strings; the schema's single `type` (or `object` for an `anyOf`, or the
  text of a `type` list) picks int() / float() / `== "true"` / json.loads then ast.literal_eval.
- "coerce" (0.23+): `coerce_to_schema_type` over every type the schema names (`type` string or
  list, `enum` values, `anyOf`/`oneOf`/`allOf`), ranked null > integer > number > boolean >
  object > array > string; a value no type fits goes through json.loads, else stays a string.
- "expat" (0.19/0.23 `qwen3_xml`): one `type` string (anything unusual counts as a string);
  `null` becomes `""` for strings; an integer or number that does not convert is written into
  the arguments as it stands (valid only when it is itself JSON).

Where vLLM cannot produce JSON (an overflowing float it raises on, a Python set from
literal_eval, NaN it would write as `NaN`), `CallFails` is raised: vLLM fails that call (or the
whole response), and the proxy reports the call as malformed instead of losing it.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import warnings
from typing import Any

from proxy.toolcalls.base import Schemas, loads_strict
from proxy.toolcalls.families import XmlRules

__all__ = ["CallFails", "expat_keeps_raw", "properties_for", "type_value"]

_STRING_TYPES = frozenset({"string", "str", "text", "varchar", "char", "enum"})
_INT_PREFIXES = ("int", "uint", "long", "short", "unsigned")
_NUMBER_PREFIXES = ("num", "float")
_BOOL_TYPES = frozenset({"boolean", "bool", "binary"})
_TYPE_ALIASES = {
    "str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string",
    "int": "integer", "int32": "integer", "int64": "integer", "uint": "integer", "uint32": "integer",
    "uint64": "integer", "long": "integer", "short": "integer", "unsigned": "integer",
    "float": "number", "float32": "number", "float64": "number", "double": "number",
    "bool": "boolean", "dict": "object", "arr": "array", "list": "array", "sequence": "array",
}
_PRIORITY = ("null", "integer", "number", "boolean", "object", "array", "string")


class CallFails(ValueError):
    """vLLM fails on this value: the call is not produced (reported as malformed here)."""


def properties_for(schemas: Schemas, function_name: str, rules: XmlRules) -> dict[str, Any]:
    """The per-parameter schemas of one tool, looked up as the family looks them up."""
    parameters = schemas.get(function_name)
    if not isinstance(parameters, dict) or not parameters:
        return {}
    properties = parameters.get("properties")
    if rules.typing == "coerce":  # find_tool_properties: `properties` or nothing
        return properties if isinstance(properties, dict) else {}
    if "properties" in parameters:  # _get_arguments_config / _get_param_type
        return properties if isinstance(properties, dict) else {}
    return parameters


def type_value(value: str, key: str, properties: dict[str, Any], rules: XmlRules) -> Any:
    """One value typed as the family types it; raises CallFails where vLLM fails."""
    if rules.typing == "coerce":
        schema = properties.get(key)
        if rules.engine == "engine" and not isinstance(schema, dict):
            return value  # the engine coerces only parameters its schema names
        return _strict(_coerce(value, _schema_types(schema), rules))
    if rules.typing == "expat":
        return _expat(value, key, properties)
    return _strict(_convert_019(value, key, properties))


def _strict(value: Any) -> Any:
    """What vLLM would serialise must be JSON a client can read."""
    kind = type(value)
    if kind is str or kind is bool or kind is int or value is None:  # the common case, always JSON
        return value
    if kind is float:
        if math.isfinite(value):
            return value
        raise CallFails(f"vLLM would write {value!r}, which is not JSON")
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise CallFails(f"vLLM cannot write this value as JSON ({type(value).__name__})") from exc
    # A containers' JSON is what the client gets (a literal_eval tuple becomes a list).
    return json.loads(text) if isinstance(value, (list, dict, tuple)) else value


# -- 0.19 qwen3_coder ---------------------------------------------------------------------------


def _convert_019(value: str, key: str, properties: dict[str, Any]) -> Any:
    if value.lower() == "null":
        return None
    if key not in properties:
        return value
    schema = properties[key]
    if isinstance(schema, dict) and "type" in schema:
        kind = str(schema["type"]).strip().lower()  # a list becomes its text: "['string', 'null']"
    elif isinstance(schema, dict) and "anyOf" in schema:
        kind = "object"  # vLLM: "anyOf has no top-level type; treat as object"
    else:
        kind = "string"
    if kind in _STRING_TYPES:
        return value
    if kind.startswith(_INT_PREFIXES):
        try:
            return int(value)
        except ValueError:
            return value
    if kind.startswith(_NUMBER_PREFIXES):
        return _number_019(value)
    if kind in _BOOL_TYPES:
        return value.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            pass
    return _literal(value)


def _number_019(value: str) -> Any:
    try:
        number = float(value)
    except ValueError:
        return value
    try:
        return number if number - int(number) != 0 else int(number)
    except ValueError:  # int(nan)
        return value
    except OverflowError as exc:  # int(inf): vLLM does not catch it
        raise CallFails(f"vLLM fails on the number {value!r}") from exc


def _literal(value: str) -> Any:
    try:
        return _literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value


def _literal_eval(value: str) -> Any:
    with warnings.catch_warnings():  # model text such as "1.5x" makes the compiler warn
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.literal_eval(value)


# -- 0.23+ coerce_to_schema_type ----------------------------------------------------------------


def _schema_types(schema: Any, depth: int = 0) -> tuple[str, ...]:
    """extract_types_from_schema: every type the schema names; "string" when none."""
    if not isinstance(schema, dict) or depth > 16:
        return ("string",)
    types: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        types.add(declared)
    elif isinstance(declared, list):
        types.update(t for t in declared if isinstance(t, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        for item in enum:
            types.add(_enum_type(item))
    for union in ("anyOf", "oneOf", "allOf"):
        members = schema.get(union)
        if isinstance(members, list):
            for member in members:
                types.update(_schema_types(member, depth + 1))
    return tuple(sorted(types)) if types else ("string",)


def _enum_type(item: Any) -> str:
    if item is None:
        return "null"
    if isinstance(item, bool):
        return "boolean"
    if isinstance(item, int):
        return "integer"
    if isinstance(item, float):
        return "number"
    if isinstance(item, list):
        return "array"
    if isinstance(item, dict):
        return "object"
    return "string"


@functools.lru_cache(maxsize=256)
def _normalized(types: tuple[str, ...]) -> frozenset[str]:
    return frozenset(_TYPE_ALIASES.get(t.strip().lower(), t.strip().lower()) for t in types)


def _coerce(value: str, types: tuple[str, ...], rules: XmlRules) -> Any:
    wanted = _normalized(types)
    for kind in _PRIORITY:
        if kind not in wanted:
            continue
        if kind == "null":
            if value.lower() == "null":
                return None
        elif kind == "string":
            return value
        elif kind == "integer":
            try:
                return int(value)
            except ValueError:
                pass
        elif kind == "number":
            number = _coerce_number(value, rules)
            if number is not _SKIP:
                return number
        elif kind == "boolean":
            lowered = value.lower().strip()
            if lowered in ("true", "1"):
                return True
            if lowered in ("false", "0"):
                return False
        else:  # object, array
            try:
                parsed = json.loads(value)
            except (ValueError, RecursionError):
                continue
            if not rules.finite_guard or _finite(parsed):
                return parsed
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return value
    if rules.finite_guard and not _finite(parsed):
        return value
    return parsed


_SKIP = object()


def _coerce_number(value: str, rules: XmlRules) -> Any:
    if rules.number_int_first:
        try:
            return int(value)
        except ValueError:
            pass
    try:
        number = float(value)
    except ValueError:
        return _SKIP
    if rules.finite_guard and not math.isfinite(number):
        return _SKIP
    try:
        return number if number != int(number) else int(number)
    except ValueError:  # int(nan)
        return _SKIP
    except OverflowError as exc:  # int(inf): 0.23 does not catch it
        raise CallFails(f"vLLM fails on the number {value!r}") from exc


def _finite(parsed: Any) -> bool:
    try:
        json.dumps(parsed, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return False
    return True


# -- 0.19/0.23 qwen3_xml ------------------------------------------------------------------------


def _expat_type(key: str, properties: dict[str, Any]) -> str:
    schema = properties.get(key)
    if not isinstance(schema, dict):
        return "string"
    kind = str(schema.get("type", "string"))
    known = (kind in _STRING_TYPES or kind.startswith(_INT_PREFIXES + _NUMBER_PREFIXES) or kind in _BOOL_TYPES
             or kind in ("object", "array", "arr", "sequence") or kind.startswith(("dict", "list")))
    return kind.strip().lower() if known else "string"


def expat_keeps_raw(value: str, key: str, properties: dict[str, Any]) -> bool:
    """qwen3_xml defers arrays (and objects written with quotes and brackets): it reads their raw
    text with literal_eval, and keeps that text, untrimmed, when literal_eval fails."""
    kind = _expat_type(key, properties)
    return kind in ("array", "arr", "sequence") or kind.startswith(("dict", "list")) or (
        kind == "object" and "'" in value and any(c in value for c in "[{(")
    )


def _expat(value: str, key: str, properties: dict[str, Any]) -> Any:
    kind = _expat_type(key, properties)
    if expat_keeps_raw(value, key, properties):
        # Deferred: literal_eval of the raw text, else the text as a string.
        try:
            return _strict(_literal_eval(value))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, CallFails):
            return value
    if value == "" and kind not in _STRING_TYPES:
        raise CallFails("vLLM's qwen3_xml writes no value for an empty non-string: the arguments are not JSON")
    if value.lower() == "null":
        if kind in _STRING_TYPES:
            return ""
        raise CallFails("vLLM's qwen3_xml writes no value for null here: the arguments are not JSON")
    if kind in _STRING_TYPES:
        return value
    if kind in _BOOL_TYPES:
        return value.lower() == "true"
    if kind.startswith(_INT_PREFIXES):
        try:
            return int(value)
        except ValueError:
            return _written_as_is(value)
    if kind.startswith(_NUMBER_PREFIXES):
        try:
            number = float(value)
            return _strict(number if number - int(number) != 0 else int(number))
        except ValueError:
            return _written_as_is(value)
        except OverflowError as exc:
            raise CallFails(f"vLLM fails on the number {value!r}") from exc
    return _written_as_is(value)  # object: the text goes into the arguments unquoted


def _written_as_is(value: str) -> Any:
    """qwen3_xml writes an unconverted non-string value into the JSON as it stands."""
    if value == "":
        raise CallFails("vLLM's qwen3_xml writes no value here: the arguments are not JSON")
    try:
        return loads_strict(value)
    except (ValueError, RecursionError) as exc:
        raise CallFails(f"vLLM's qwen3_xml writes {value[:40]!r} unquoted: the arguments are not JSON") from exc
