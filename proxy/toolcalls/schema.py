"""The request's tool schemas by tool name: what XML parameter values are typed by (as the upstream's
vLLM family types them: `proxy.toolcalls.value_types`)."""

from __future__ import annotations

from typing import Any

from proxy.toolcalls.base import Schemas

__all__ = ["tool_schemas"]


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

