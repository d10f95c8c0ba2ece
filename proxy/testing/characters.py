"""Model characters measured on live work, as scripted-upstream responders.

A "looping" model (the MoE models) answers a rejection with variants of the same blocked shape;
a "switching" model (the dense model) moves to an allowed script at the first refusal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from proxy.testing.scripted_upstream import Reply

__all__ = ["OPENCODE_TOOLS", "attempts_in_turn", "bash_sequence", "looping", "ran_a_tool", "switching"]


def _tool(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": f"{name} tool", "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


# The tools OpenCode 1.18 offers (docs/peers.md), with their JSON schema types.
OPENCODE_TOOLS = [
    _tool("bash", {"command": {"type": "string"}, "timeout": {"type": "number"},
                   "workdir": {"type": "string"}, "description": {"type": "string"}}, ["command"]),
    _tool("read", {"filePath": {"type": "string"}, "offset": {"type": "number"}, "limit": {"type": "number"}},
          ["filePath"]),
    _tool("edit", {"filePath": {"type": "string"}, "oldString": {"type": "string"},
                   "newString": {"type": "string"}, "replaceAll": {"type": "boolean"}},
          ["filePath", "oldString", "newString"]),
    _tool("write", {"content": {"type": "string"}, "filePath": {"type": "string"}}, ["content", "filePath"]),
    _tool("glob", {"pattern": {"type": "string"}, "path": {"type": "string"}}, ["pattern"]),
    _tool("grep", {"pattern": {"type": "string"}, "path": {"type": "string"}, "include": {"type": "string"}},
          ["pattern"]),
]


def _refused(message: dict[str, Any]) -> bool:
    """A tool result that says the call did not run: the proxy's feedback, or a harness's denial."""
    text = str(message.get("content") or "")
    return text.startswith(("Rejected", "Not run")) or "denied" in text.lower()


def attempts_in_turn(body: dict[str, Any]) -> int:
    """How many refused tries follow the last user message: the model's tries so far in this turn."""
    count = 0
    for message in reversed(body.get("messages") or []):
        role = message.get("role")
        if role == "user":
            break
        if role == "tool" and _refused(message):
            count += 1
    return count


def ran_a_tool(body: dict[str, Any]) -> bool:
    """The last message is the result of a tool that actually ran: time to answer in text."""
    messages = body.get("messages") or []
    return bool(messages) and messages[-1].get("role") == "tool" and not _refused(messages[-1])


def bash_sequence(commands: Sequence[str], *, content: str = "", xml: bool = False,
                  final: str = "Done.") -> Callable[[dict[str, Any]], Reply]:
    """Proposes commands[k] as the k-th try of a turn; after the last, answers with text."""

    def respond(body: dict[str, Any]) -> Reply:
        k = attempts_in_turn(body)
        if k >= len(commands) or ran_a_tool(body):
            return Reply(content=final)
        if xml:
            text = (f"{content}<tool_call>\n<function=bash>\n<parameter=command>\n{commands[k]}\n"
                    "</parameter>\n</function>\n</tool_call>")
            return Reply(content=text, finish_reason="stop")
        return Reply(content=content, tool_calls=[("bash", {"command": commands[k]})])

    return respond


def looping(query: str = "rust async") -> Callable[[dict[str, Any]], Reply]:
    base = f'uv run scripts/search.py "{query}"'
    return bash_sequence([f"{base} | head -5", f"{base} | head -10", f"{base} | tail -3", base])


def switching(query: str = "rust async") -> Callable[[dict[str, Any]], Reply]:
    base = f'uv run scripts/search.py "{query}"'
    return bash_sequence([f"{base} | head -5", base])
