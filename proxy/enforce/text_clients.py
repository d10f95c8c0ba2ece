"""Agents that act on text: which client a request comes from, which text action formats it runs, and the
verdicts of the actions one assistant text holds.

A client is recognised by what it writes into the request itself (its system prompt and first user message),
never by model output or tool results. Its profile names the text formats it executes
(proxy/toolcalls/registry.py `TEXT_FORMATS`) and its protocol sentinels: exact commands it interprets itself
(mini-swe-agent ends a run with `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`), allowed verbatim like the
policy's `shell.exact`. A client whose actions cannot be judged as commands (smolagents' CodeAgent writes Python
programs) is recognised with the reason, and each of its acting turns is counted as ungoverned
(`allowlist_proxy_ungoverned_text_actions_total`), as is any action a format recognises but cannot read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from proxy.enforce.actions import UNJUDGEABLE
from proxy.enforce.judging import judge_calls
from proxy.policy import LoadedPolicy
from proxy.policy.tools.profiles import ToolSet
from proxy.policy.verdict import ALLOW, REJECT, Verdict
from proxy.record import JudgedCall
from proxy.toolcalls.registry import TEXT_FORMATS

__all__ = ["TEXT_CLIENTS", "TextClient", "judge_text", "prompt_text", "recognise", "recognise_text",
           "ungoverned_reasons"]


@dataclass(frozen=True, slots=True)
class TextClient:
    name: str
    marker: re.Pattern[str]  # searched in the client-written text of the request
    formats: tuple[str, ...] = ()
    sentinels: tuple[str, ...] = ()
    ungoverned: str | None = None  # why this client's actions are not judged (counted instead)
    acts: re.Pattern[str] | None = None  # what an acting turn of an ungoverned client looks like


TEXT_CLIENTS = (
    TextClient("mini-swe-agent", re.compile(r"mswea_bash_command"), ("mswea_bash_command",),
               ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",)),
    TextClient("bash-blocks", re.compile(r"(?i)exactly one bash code block"), ("bash_block",),
               ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "echo MINI_SWE_AGENT_FINAL_OUTPUT")),
    # Roo Code and Kilo Code's legacy prompt name themselves; their tags are Cline's with names of their own.
    # Anchored: unanchored, the lookahead's `.*` rescans the rest of the text from every start (quadratic).
    TextClient("roo-xml", re.compile(r"(?s)\A(?=.*<execute_command>\s*<command>).*\b(?:Roo|Kilo Code)\b"),
               ("roo_xml",)),
    TextClient("cline-xml", re.compile(r"<execute_command>\s*<command>"), ("cline_xml",)),
    TextClient("smolagents-code", re.compile(r"(?s)final_answer.*(?:<end_code>|</code>)"),
               ungoverned="smolagents CodeAgent runs Python programs, which are not judged as commands",
               acts=re.compile(r"<code>|```py")),
)


def _client_text(messages: Iterable[Any]) -> str:
    """The request's system/developer messages and its first user message: what the client itself wrote."""
    parts: list[str] = []
    first_user = True
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in ("system", "developer") or (role == "user" and first_user):
            first_user = first_user and role != "user"
            parts.append(_text(message.get("content")))
    return "\n".join(parts)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def recognise(messages: Iterable[Any]) -> TextClient | None:
    return recognise_text(_client_text(messages))


def recognise_text(text: str) -> TextClient | None:
    return next((client for client in TEXT_CLIENTS if client.marker.search(text)), None)


def prompt_text(prompt: Any) -> str:
    """A raw completion's prompt (a string or a list of them; token ids carry no text the proxy reads). It has no
    roles to keep the client's own part apart: recognising a client from it errs only towards judging more."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n".join(p for p in prompt if isinstance(p, str))
    return ""


def ungoverned_reasons(client: TextClient, text: str) -> list[str]:
    """Why the actions of this assistant text pass unjudged (empty: none, or all of them read)."""
    reasons = [client.ungoverned] if client.ungoverned and client.acts and client.acts.search(text) else []
    for name in client.formats:
        reasons += TEXT_FORMATS[name].read(text).unreadable
    return reasons


def judge_text(policy: LoadedPolicy, client: TextClient, text: str, *, tools: ToolSet | None,
               session_id: str | None) -> list[JudgedCall]:
    """The verdicts of the actions this client would run from `text`: a sentinel of the client is allowed
    verbatim; everything else is judged as the tool its format maps (where the policy's `shell.exact` applies)."""
    exact = set(client.sentinels)
    out: list[JudgedCall] = []
    for name in client.formats:
        for call in TEXT_FORMATS[name].read(text).calls:
            command = call.arguments.get("command") if call.arguments else None
            if call.error is not None:  # a spelling the client's releases read differently: refused
                out.append(JudgedCall(call, Verdict(REJECT, (UNJUDGEABLE,), f"{UNJUDGEABLE}:{call.name[:40]}")))
            elif isinstance(command, str) and command.strip() in exact:
                out.append(JudgedCall(call, Verdict(ALLOW, (), "exact")))
            else:
                out += judge_calls(policy, [call], None, tools=tools, session_id=session_id, repair=False)
    return out
