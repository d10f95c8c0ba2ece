"""Typing XML values from the request's tool schemas, as vLLM's qwen3_coder does (and unions)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.toolcalls import tool_schemas
from proxy.toolcalls.schema import convert_param_value, parameter_properties

PROPS: dict[str, Any] = {
    "s": {"type": "string"},
    "enum": {"type": "string", "enum": ["a"]},
    "i": {"type": "integer"},
    "n": {"type": "number"},
    "b": {"type": "boolean"},
    "o": {"type": "object"},
    "a": {"type": "array"},
    "odd": {"type": "Int64"},
    "other": {"type": "whatever"},
    "notype": {"description": "no type"},
    "junk": "not a schema",
    "nullable": {"type": ["integer", "null"]},
    "union": {"type": ["string", "integer"]},
    "any": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
    "nested": {"oneOf": [{"anyOf": [{"type": "array"}]}, {"type": "number"}]},
}

CASES = [
    ("s", "  keep  me ", "  keep  me "),
    ("s", "42", "42"),
    ("s", "null", None),  # vLLM: "null" is None for any type
    ("s", "Null", None),
    ("enum", "a", "a"),
    ("i", "42", 42),
    ("i", "-7", -7),
    ("i", "4.5", "4.5"),  # not an int: the string stays
    ("i", "", ""),
    ("n", "2.5", 2.5),
    ("n", "3.0", 3),  # an integral float is an int, as vLLM does
    ("n", "1e3", 1000),
    ("n", "nan", "nan"),
    ("n", "-inf", "-inf"),
    ("n", "ten", "ten"),
    ("b", "true", True),
    ("b", "TRUE", True),
    ("b", "false", False),
    ("b", "yes", False),  # vLLM degenerates anything else to false
    ("o", '{"a": [1, 2]}', {"a": [1, 2]}),
    ("o", "{'a': True}", {"a": True}),  # vLLM's ast.literal_eval fallback
    ("o", "{1, 2}", "{1, 2}"),  # a set is not JSON: the string stays
    ("o", "not json", "not json"),
    ("o", '{"n": NaN}', '{"n": NaN}'),
    ("a", '[1, "x"]', [1, "x"]),
    ("a", "(1, 2)", [1, 2]),
    ("odd", "12", 12),
    ("other", "[1]", [1]),
    ("other", "hello", "hello"),
    ("notype", "12", "12"),
    ("junk", "12", "12"),
    ("unknown", "12", "12"),
    ("nullable", "5", 5),
    ("nullable", "null", None),
    ("nullable", "x", "x"),
    ("union", "5", "5"),  # schema order: string first
    ("any", "5", 5),
    ("any", "true", True),
    ("any", "maybe", "maybe"),
    ("nested", "[1]", [1]),
    ("nested", "1.5", 1.5),
]


@pytest.mark.parametrize(("name", "value", "expected"), CASES)
def test_convert(name: str, value: str, expected: Any) -> None:
    result = convert_param_value(value, name, PROPS)
    assert result == expected and type(result) is type(expected)


def test_deep_or_huge_literals_degrade_to_the_string() -> None:
    deep = "[" * 5000 + "]" * 5000
    assert convert_param_value(deep, "a", PROPS) == deep
    big = "9" * 5000
    assert convert_param_value(big, "i", PROPS) == big


def test_tool_schemas_tolerates_junk() -> None:
    assert tool_schemas(None) == {}
    assert tool_schemas("tools") == {}  # type: ignore[arg-type]
    tools: Any = [
        None,
        1,
        {"type": "function"},
        {"type": "function", "function": "x"},
        {"type": "function", "function": {"name": 5}},
        {"type": "retrieval", "function": {"name": "other"}},
        {"type": "function", "function": {"name": "nojunk", "parameters": "junk"}},
        {"function": {"name": "untyped", "parameters": {"type": "object", "properties": {"x": {}}}}},
    ]
    assert tool_schemas(tools) == {
        "nojunk": {},
        "untyped": {"type": "object", "properties": {"x": {}}},
    }


def test_parameter_properties_like_vllm() -> None:
    schemas = {
        "a": {"type": "object", "properties": {"x": {"type": "integer"}}},
        "b": {"x": {"type": "integer"}},
        "c": {"properties": "junk"},
    }
    assert parameter_properties(schemas, "a") == {"x": {"type": "integer"}}
    assert parameter_properties(schemas, "b") == {"x": {"type": "integer"}}  # no `properties`: the schema
    assert parameter_properties(schemas, "c") == {}
    assert parameter_properties(schemas, "missing") == {}
