"""The allowlist of chat and completion shapes: every field a client may read a call from is one the proxy
judges, or the output is `unjudgeable`.

Known fields are read by the extractors (`content`, `reasoning`, `tool_calls` ...). An unknown field passes
when it can carry no action: a string, number, boolean, null or empty container (text-only fields a
client shows at most). An unknown object or non-empty list in a message, a delta or a choice, a legacy
`function_call`, a chunk choice with a whole `message`: the proxy does not know how a client reads them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["choice_problem", "fields_problem", "parts_text"]

# Fields the extractors read, or that vLLM sends holding no call (logprobs, token ids).
_MESSAGE_FIELDS = frozenset({"role", "content", "reasoning", "reasoning_content", "tool_calls", "refusal",
                             "annotations", "name"})
_CHOICE_FIELDS = frozenset({"index", "logprobs", "finish_reason", "stop_reason", "token_ids", "text",
                            "prompt_logprobs", "prompt_token_ids"})


def _inert(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool) or value in ({}, [])


def fields_problem(message: Any, where: str) -> str | None:
    """Why a chat `message` / `delta` holds something the proxy cannot judge; None when it does not."""
    if message is None:
        return None
    if not isinstance(message, dict):
        return f"a {where} that is not an object"
    function_call = message.get("function_call")
    if function_call is not None:
        return f"a legacy `function_call` in the {where}"
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return f"a {where} `content` that is not a string"
    for key, value in message.items():
        if key not in _MESSAGE_FIELDS and key != "function_call" and not _inert(value):
            return f"an unknown field `{key[:40]}` in the {where} that could carry an action"
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        return f"`tool_calls` in the {where} that is not a list"
    return None


def choice_problem(choice: Any, part: str) -> str | None:
    """Why a choice (`part`: "delta" in a stream, "message" whole, "text" for completions) cannot be judged."""
    if not isinstance(choice, dict):
        return "a choice that is not an object"
    index = choice.get("index", 0)
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        return f"a choice index that is not a whole number ({str(index)[:20]})"
    for key, value in choice.items():
        if key != part and key not in _CHOICE_FIELDS and not _inert(value):
            return f"an unknown field `{key[:40]}` in a choice that could carry an action"
    if part == "text":
        text = choice.get("text")
        return None if text is None or isinstance(text, str) else "a completion `text` that is not a string"
    return fields_problem(choice.get(part), part)


def parts_text(content: Any) -> str:
    """The text of a content that is a string or a list of parts (Responses items, Anthropic blocks): every
    part's `text` joined, whatever its type."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""
