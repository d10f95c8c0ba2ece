"""Whether a request demands a tool call, in any judged route's shape.

A client that demands a call (smolagents sends `tool_choice: "required"`) reads a plain text answer as a broken
turn and asks again until its own step limit, never telling its user why. For such a request a turn whose retry
budget is spent ends in an error whose message is the explanation (docs/routes.md "A turn that must call a tool").
"""

from __future__ import annotations

from typing import Any

__all__ = ["demands_call"]

# `tool_choice` objects that name one tool or demand any: chat `{"type": "function", "function": {...}}`,
# Responses `{"type": "function"|"custom", "name": ...}` and `{"type": "allowed_tools", "mode": "required"}`,
# Messages `{"type": "any"}` and `{"type": "tool", "name": ...}`.
_NAMING = frozenset({"function", "custom", "tool", "any"})


def demands_call(payload: dict[str, Any]) -> bool:
    choice: Any = payload.get("tool_choice")  # unvalidated JSON
    if choice == "required":
        return True
    if not isinstance(choice, dict):
        return False
    kind = choice.get("type")
    return kind in _NAMING or (kind == "allowed_tools" and choice.get("mode") == "required")
