"""Scripted models for OpenCode runs.

A turn walks through its proposed calls: each refusal (the proxy's rejection feedback, or
OpenCode's own permission denial) moves it to the next; any other tool result means a call
really ran, and the model ends the turn with text. OpenCode's title request (no tools) gets a
short title.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from proxy.enforce.feedback_turns import SIBLING_NOT_RUN
from proxy.policy import load_policy_file
from proxy.testing.scripted_upstream import Reply

__all__ = [
    "OPENCODE_DENIAL", "PROXY_REJECTION", "REFUSAL_LINE", "answers_after_refusal", "is_refusal", "next_step",
    "refusals_in_turn", "scripted_turn", "with_title",
]

# The opening of OpenCode 1.18's PermissionDeniedError message (a config rule said deny).
OPENCODE_DENIAL = "The user has specified a rule which prevents you from using this specific tool call"
_STRICT = Path(__file__).resolve().parents[2] / "policies" / "strict.yaml"
# What the proxy's tool messages open with: the policy's feedback up to its first placeholder
# ("Rejected ("), or the note on a sibling call that was held back with a rejected one.
_POLICY = load_policy_file(_STRICT).policy  # its own feedback, or the built-in one it leaves in place
PROXY_REJECTION = (*sorted({_POLICY.feedback_template(c).split("{")[0] for c in ("shell", "paths", "other")}),
                   SIBLING_NOT_RUN)

Call = tuple[str, dict[str, Any]]
# How the line a turn delivered after a refusal carries begins (proxy/enforce/feedback_turns.py `refusal_note`).
REFUSAL_LINE = "allowlist-proxy refused in this turn: "


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def is_refusal(message: dict[str, Any]) -> bool:
    text = _text(message).lstrip()
    return text.startswith(PROXY_REJECTION) or OPENCODE_DENIAL in text


def refusals_in_turn(body: dict[str, Any]) -> int:
    count = 0
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            break
        if message.get("role") == "tool" and is_refusal(message):
            count += 1
    return count


def scripted_turn(calls: list[Call], *, final: str = "Finished.", repeat_last: bool = False,
                  title: str = "E2E session") -> Callable[[dict[str, Any]], Reply]:
    """Proposes calls[k] after k refusals in this turn; `repeat_last` makes a model that never complies."""

    def respond(body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return Reply(content=title)
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        if last.get("role") == "tool" and not is_refusal(last):
            return Reply(content=final)
        k = refusals_in_turn(body)
        if k >= len(calls):
            if not repeat_last:
                return Reply(content=final)
            k = len(calls) - 1
        name, arguments = calls[k]
        return Reply(content="", tool_calls=[(name, arguments)])

    return respond


def next_step(body: dict[str, Any], steps: list[list[Call]], *, narration: str = "Let me do that.") -> Reply:
    """Steps of alternatives: a step's k-th call is proposed after k refusals of that step; a tool result that is
    not a refusal means the call ran, and the next step starts; after the last, the turn ends."""
    done = refused = 0
    for message in body.get("messages") or []:
        if message.get("role") != "tool":
            continue
        if is_refusal(message):
            refused += 1
        else:
            done, refused = done + 1, 0
    if done >= len(steps) or refused >= len(steps[done]):
        return Reply(content="Finished.")
    return Reply(content=narration, tool_calls=[steps[done][refused]])


def with_title(responder: Callable[[dict[str, Any]], Reply], title: str = "E2E session",
               ) -> Callable[[dict[str, Any]], Reply]:
    """Answers OpenCode's title request (it offers no tools) before `responder` sees it."""

    def respond(body: dict[str, Any]) -> Reply:
        return responder(body) if body.get("tools") else Reply(content=title)

    return respond


def answers_after_refusal(call: Callable[[dict[str, Any]], Call | None], *, narration: str, answer: str,
                          title: str = "E2E session") -> Callable[[dict[str, Any]], Reply]:
    """A model that narrates and proposes `call(body)` (None: a side request, answered with `title`), and once the
    proxy's retry tells it the call was refused, gives up and answers in text, as Qwen3-Coder does."""

    def respond(body: dict[str, Any]) -> Reply:
        proposed = call(body) if body.get("tools") else None
        if proposed is None:
            return Reply(content=title)
        if refusals_in_turn(body):
            return Reply(content=answer)
        return Reply(content=narration, tool_calls=[proposed])

    return respond
