"""What enforcement says to the model after a rejection, and to the client when the budget is spent."""

from __future__ import annotations

import unicodedata
from typing import Any

from proxy.policy import LoadedPolicy, format_feedback
from proxy.record import JudgedCall, shown_call
from proxy.toolcalls import openai_call
from proxy.toolcalls.text_actions import is_text_action

__all__ = ["SIBLING_NOT_RUN", "blocked_message", "refusal_note", "retry_messages", "turn_allowed"]

SIBLING_NOT_RUN = "Not run: another tool call in the same turn was rejected. Send the calls again, corrected."
# What a refusal note names: the first few distinct calls, each cut short; more are counted.
_NOTE_CALLS = 3
_NOTE_SHOWN = 160


def turn_allowed(judged: list[JudgedCall]) -> bool:
    return all(item.allowed for item in judged)


def _assistant_turn(content: str | None, judged: list[JudgedCall]) -> dict[str, Any]:
    # A chat template renders arguments as an object; unparseable ones are replayed empty
    # and quoted in the feedback instead, so the retry itself cannot fail upstream.
    calls = [openai_call(item.call, arguments="{}" if item.call.malformed else item.call.arguments_text)
             for item in judged]
    if not calls:  # a text-acting client's turn: its actions are in the content
        return {"role": "assistant", "content": content or ""}
    return {"role": "assistant", "content": content or None, "tool_calls": calls}


def _feedback(policy: LoadedPolicy, item: JudgedCall) -> str:
    call = item.call
    text = format_feedback(policy.policy, item.verdict, tool=call.name, arguments=call.arguments,
                           variant=item.variant, unrooted=item.unrooted)
    if call.arguments is None:
        text += f"\nThe arguments could not be read ({call.error or 'not a JSON object'}): {call.arguments_text[:500]}"
    return text


def retry_messages(policy: LoadedPolicy, content: str | None, judged: list[JudgedCall]) -> list[dict[str, Any]]:
    """The assistant turn that was held back, then one tool message per call saying what happened. Actions
    written in the text (text_actions.py) have no tool id: what happened to them follows as one user message."""
    called = [item for item in judged if not is_text_action(item.call)]
    written = [item for item in judged if is_text_action(item.call)]
    messages = [_assistant_turn(content, called)]
    for item in called:
        text = SIBLING_NOT_RUN if item.allowed else _feedback(policy, item)
        messages.append({"role": "tool", "tool_call_id": item.call.id, "content": text})
    if written:
        lines = [f"Not run: {_describe(item, policy)}" for item in written]
        lines += [_feedback(policy, item) for item in written if not item.allowed]
        messages.append({"role": "user", "content": "\n".join(lines)})
    return messages


def _describe(item: JudgedCall, policy: LoadedPolicy, limit: int = 300) -> str:
    call = item.call
    if call.source == "unjudgeable":  # its content never reaches the client, not even quoted
        return f"{call.name}: {call.error} (unjudgeable)"
    shown = shown_call(policy.policy, call)
    if len(shown) > limit:
        shown = shown[:limit] + "..."
    return f"`{shown}` ({', '.join(item.verdict.reasons) or item.verdict.decision})"


def blocked_message(policy: LoadedPolicy, judged: list[JudgedCall], attempts: int) -> str:
    blocked = [item for item in judged if not item.allowed]
    lines = [
        f"allowlist-proxy blocked this turn after {attempts} attempt{'s' if attempts != 1 else ''}: "
        "the model kept proposing tool calls the policy does not allow.",
    ]
    lines += [f"- {_describe(item, policy)}" for item in blocked]
    if blocked:
        lines.append(_feedback(policy, blocked[0]) if blocked[0].call.source != "unjudgeable" else
                     "The upstream's output could not be judged, so none of it was relayed.")
    return _inert("\n".join(lines))


def refusal_note(policy: LoadedPolicy, refused: list[JudgedCall], *, quote: bool = True) -> str:
    """The one line a turn delivered after a refusal carries, so the user learns what the proxy refused and why
    (the reason codes), in `blocked_message`'s words for each call: the distinct refused calls of the turn, the
    first few named, the rest counted. One line: a control character of a quoted call is written as its escape,
    so no fenced block or action a text-acting client reads can start inside it. Without `quote` (a client that
    runs actions written in its text) a call is named by its tool only: nothing the model wrote is repeated."""
    described = list(dict.fromkeys(_one_line(_describe(item, policy, _NOTE_SHOWN) if quote else _named(item))
                                   for item in refused))
    if not described:
        return ""
    more = len(described) - _NOTE_CALLS
    text = "allowlist-proxy refused in this turn: " + "; ".join(described[:_NOTE_CALLS])
    return _inert(text + (f" and {more} more." if more > 0 else "."))


def _named(item: JudgedCall) -> str:
    what = "action" if is_text_action(item.call) else "call"
    return f"the `{item.call.name[:80]}` {what} ({', '.join(item.verdict.reasons) or item.verdict.decision})"


def _one_line(text: str) -> str:
    return "".join(c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) in _BREAKS else c
                   for c in text)


_BREAKS = frozenset({"Cc", "Zl", "Zp"})


def _inert(text: str) -> str:
    # Quoted in text, a blocked call must not read as a call: no tag a client's text parser would open.
    return text.replace("<", "\u2039")

