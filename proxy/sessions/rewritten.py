"""Clients that rewrite the turns they were given before they send them back: a delivered turn is found again only
in the client's spelling.

Open Interpreter 0.4 keeps no call ids. It turns a delivered turn into messages of its own (the text, then a code
message) and sends it back as two assistant messages, the text and then the call with empty text, the call renamed
`toolu_N` (N counting the calls of the conversation: interpreter/core/llm/run_tool_calling_llm.py
`process_messages`) and its result answering that name. No turn of its next request is then the turn the proxy
delivered, and no id it names is one the proxy gave out: each step began a new session. Its lineage is read over the
conversation as delivered (`as_delivered`: an assistant text joined with the calls that follow it, no call ids), and
its reply is remembered without its ids (`Digests.call_ids` False), so both sides of a turn hash alike.

DSPy's ReAct sends each step as a new conversation: its instructions and one user message holding the program's
inputs and the trajectory so far (each step's thought, tool name and arguments, and observation), which its answer
extends by a step. A step's request continues the session of the request whose trajectory was this one's without
its last step (`history_keys`: the key it continues, and the key it reaches, held with its delivered reply).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.toolcalls.text_dspy import trajectory_steps

__all__ = ["as_delivered", "history_keys", "renames_calls", "without_call_ids"]

_OPEN_INTERPRETER = "You are Open Interpreter"


def renames_calls(messages: Sequence[Any]) -> bool:
    """The conversation is Open Interpreter's (its system prompt says so): it renames the calls it was given."""
    return any(isinstance(m, Mapping) and m.get("role") == "system" and isinstance(m.get("content"), str)
               and _OPEN_INTERPRETER in m["content"] for m in messages)


def without_call_ids(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message with no call ids: its calls' and the one it answers."""
    out = {k: v for k, v in message.items() if k != "tool_call_id"}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [{k: v for k, v in c.items() if k != "id"} if isinstance(c, Mapping) else c
                             for c in calls]
    return out


def as_delivered(messages: Sequence[Any]) -> list[Any]:
    """The conversation as the turns were delivered: an assistant message of text followed by one holding calls with
    no text of its own is one turn again; no call ids."""
    out: list[Any] = []
    for message in messages:
        if not isinstance(message, Mapping):
            out.append(message)
            continue
        message = without_call_ids(message)
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
