"""The request's tool schemas by name, read from an OpenAI `tools` array whatever junk it holds."""

from __future__ import annotations

from typing import Any

from proxy.toolcalls import tool_schemas


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

