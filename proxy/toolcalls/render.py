"""A call as OpenAI JSON: the one place a `ToolCall` becomes a `tool_calls` entry or a stream delta.

Whatever format the model wrote a call in, the client receives it in this shape: a converted
response's `message.tool_calls`, the assistant turn replayed to the model on a retry, and the one
delta that releases a held call.
"""

from __future__ import annotations

from typing import Any

from proxy.toolcalls.base import ToolCall, dumps, new_call_id

__all__ = ["openai_call", "openai_call_delta", "relayed_arguments"]


def relayed_arguments(call: ToolCall) -> str:
    """The arguments text a client receives: a structured call's own text (the upstream's bytes, or its
    repair), a content call's arguments encoded as JSON."""
    return call.arguments_text if call.structured else dumps(call.arguments)


def openai_call(call: ToolCall, *, arguments: str | None = None) -> dict[str, Any]:
    """The call as an entry of a message's `tool_calls`; `arguments` defaults to `relayed_arguments`.

    A call without an id gets one here, once, so every rendering of it agrees.
    """
    if call.id is None:
        call.id = new_call_id()
    text = relayed_arguments(call) if arguments is None else arguments
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": text}}


def openai_call_delta(call: ToolCall, index: int) -> dict[str, Any]:
    """The call as ONE stream delta entry with id, name and the whole arguments.

    OpenCode finalizes a call as soon as its accumulated arguments parse as JSON, so a held call is
    released in one piece rather than in fragments.
    """
    return {"index": index, **openai_call(call)}
