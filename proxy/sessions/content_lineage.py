"""The lineage of what a client sent back, its call ids left out: how a client that rewrites the ids it was given
continues its session.

Lineage keys (proxy/sessions/resolve.py) hash each turn with its calls' ids, which the upstream made unique per
call, so identical scripted runs stay apart. Some clients send the delivered turns back under ids of their own:
Agno rewrites every id that lacks its provider's prefix to `call_` and a counter (`reformat_tool_call_ids`), and
smolagents renders a delivered call into the assistant turn's text (`Calling tools:\\n[{'id': ..., 'type':
'function', 'function': {'name': ..., 'arguments': ...}}]`), its result following as a user observation. For
them the same conversation is keyed a second way: each turn as `id_free` reads it (its role, its text and its
calls' names and arguments; ids and the call a tool result answers left out), hashed as resolve.py hashes a turn;
a delivered reply is remembered under that key too, and a request whose own keys find nothing is looked up by it.

No id is read from text, and none links on its own: a turn counts by what the whole conversation before it holds,
so a model that writes another conversation's call id into its narration changes nothing (that id is dropped
like every other). Identical scripted runs share these keys; each continuation then takes a session still waiting
at that turn, as with identical ids (`SessionResolver._pick`).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["FREE_PREFIX", "id_free", "may_render"]

FREE_PREFIX = "x"  # the lineage keys of this kind (the store holds them beside the others)
_RENDERED = "Calling tools:\n"
_MAX_RENDERED = 1 << 18  # a rendering longer than this is not parsed (the turn stays text)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            return raw.strip()
    return raw


def _rendered(text: str) -> tuple[str, list[dict[str, Any]]] | None:
    """smolagents' rendering of the calls it was given at the end of an assistant turn's text: the text before it
    and the calls (name and arguments); None when the text ends in no such rendering."""
    at = text.rfind(_RENDERED)
    if at < 0 or (at > 0 and text[at - 1] != "\n") or len(text) - at > _MAX_RENDERED:
        return None
    try:
        shown = ast.literal_eval(text[at + len(_RENDERED):].strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(shown, list) or not shown:
        return None
    calls = []
    for call in shown:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return None
        calls.append({"function": {"name": function["name"], "arguments": _arguments(function.get("arguments"))}})
    return text[:at], calls


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return None


def may_render(content: Any) -> bool:
    """Whether an assistant turn's content may hold smolagents' rendering of calls (a quick look, no parsing)."""
    if isinstance(content, str):
        return _RENDERED in content
    return isinstance(content, list) and any(isinstance(p, dict) and _RENDERED in str(p.get("text", ""))
                                             for p in content)


def id_free(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The turn as the id-free lineage reads it: its calls without their ids (read from smolagents' rendering
    where the turn has none), no `tool_call_id`; None when it carries no call id and renders no call (it reads as
    it is)."""
    role, calls, answers = message.get("role"), message.get("tool_calls"), message.get("tool_call_id")
    if calls:
        if not isinstance(calls, list):
            return None
        kept = [{"function": call["function"]} for call in calls
                if isinstance(call, dict) and isinstance(call.get("function"), dict)]
        return {"role": role, "content": message.get("content"), "tool_calls": kept}
    if answers is not None:
        return {"role": role, "content": message.get("content")}
    if role == "assistant":
        text = _text(message.get("content"))
        if text is not None and _RENDERED in text:
            try:
                rendered = _rendered(text)
            except RecursionError:
                return None
            if rendered is not None:
                return {"role": role, "content": rendered[0], "tool_calls": rendered[1]}
    return None
