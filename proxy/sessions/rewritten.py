"""Clients that rewrite the turns they were given before they send them back: a delivered turn is found again only
in the client's spelling.

Open Interpreter 0.4 keeps no call ids. It turns a delivered turn into messages of its own (the text, then a code
message) and sends it back as two assistant messages, the text and then the call with empty text, the call renamed
`toolu_N` (N counting the calls of the conversation: interpreter/core/llm/run_tool_calling_llm.py
`process_messages`) and its result answering that name; in its text mode it writes the turn again from its text and
code block, stripped, the block as "```LANGUAGE\nCODE\n```" (interpreter/core/llm/utils/
convert_to_openai_messages.py). No turn of its next request is then the turn the proxy delivered, and no id it names
is one the proxy gave out: each step began a new session. Its lineage is read over the conversation as delivered
(`as_delivered`: an assistant text joined with the calls that follow it) and each turn as it comes back
(`sent_back`: no call ids, an assistant text without its whitespace), and its reply is remembered the same way
(`Digests.rewritten`), so both sides of a turn hash alike. (Agno, which only renames the ids it was given, is
followed by the id-free lineage every request has: proxy/sessions/content_lineage.py.)

DSPy's ReAct sends each step as a new conversation: its instructions and one user message holding the program's
inputs and the trajectory so far (each step's thought, tool name and arguments, and observation), which its answer
extends by a step. A step's request continues the session of the request whose trajectory was this one's without
its last step (`history_keys`: the key it continues, and the key it reaches, held with its delivered reply).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.toolcalls.text_dspy import trajectory_steps

__all__ = ["as_delivered", "history_keys", "renames_calls", "sent_back"]

_OPEN_INTERPRETER = "You are Open Interpreter"


def renames_calls(messages: Sequence[Any], tools: Any = None) -> bool:
    """The conversation is one of a client that rewrites the turns it was given: Open Interpreter's (its system
    prompt says so). `tools`: the request's, for clients known by them (none now)."""
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if message.get("role") == "system" and isinstance(content, str) and _OPEN_INTERPRETER in content:
            return True
    return False


_SPACE = re.compile(r"\s+")


def sent_back(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message as such a client sends it back: no call ids (its calls' and the one it answers), an assistant's
    text without its whitespace."""
    out = {k: v for k, v in message.items() if k != "tool_call_id"}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [{k: v for k, v in c.items() if k != "id"} if isinstance(c, Mapping) else c
                             for c in calls]
    if message.get("role") == "assistant" and isinstance(message.get("content"), str):
        out["content"] = _SPACE.sub("", message["content"])
    return out


def as_delivered(messages: Sequence[Any]) -> list[Any]:
    """The conversation as the turns were delivered: an assistant message of text followed by one holding calls with
    no text of its own is one turn again; no call ids."""
    out: list[Any] = []
    for message in messages:
        if not isinstance(message, Mapping):
            out.append(message)
            continue
        message = sent_back(message)
        before = out[-1] if out else None
        if (message.get("role") == "assistant" and message.get("tool_calls") and not message.get("content")
                and isinstance(before, dict) and before.get("role") == "assistant" and not before.get("tool_calls")):
            out[-1] = {**before, "tool_calls": message["tool_calls"]}
            continue
        out.append(message)
    return out


_DSPY_INPUTS = "Your input fields are:"
_TRAJECTORY = "[[ ## trajectory ## ]]"


def _history_key(inputs: str, steps: Sequence[tuple[str, str, str]]) -> str:
    return "t" + hashlib.sha256(json.dumps([inputs, list(steps)], ensure_ascii=False).encode()).hexdigest()[:31]


def history_keys(messages: Sequence[Any]) -> tuple[str | None, str] | None:
    """A DSPy request's trajectory as lineage keys: the one it continues (None: its first step) and the one it
    reaches; None for any other conversation."""
    system = next((m.get("content") for m in messages if isinstance(m, Mapping) and m.get("role") == "system"), None)
    user = next((m.get("content") for m in messages if isinstance(m, Mapping) and m.get("role") == "user"), None)
    if not (isinstance(system, str) and _DSPY_INPUTS in system and isinstance(user, str) and _TRAJECTORY in user):
        return None
    steps, inputs = trajectory_steps(user)
    return (_history_key(inputs, steps[:-1]) if steps else None), _history_key(inputs, steps)
