"""Agents that act on text: which client a request comes from, which text action formats it runs, and the
verdicts of the actions one assistant text holds.

A client is recognised by what it writes into the request itself (its system prompt and first user message),
never by model output or tool results. Its profile names the text formats it executes
(proxy/toolcalls/registry.py `TEXT_FORMATS`), what its request states that those formats read an answer by
(`Stated`: the tools a DSPy ReAct prompt declares, aider's fence and the files in its chat) and its protocol
sentinels: exact commands it interprets itself (mini-swe-agent ends a run with
`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`), allowed verbatim like the policy's `shell.exact`, in its text
actions and in its structured shell calls alike (mini-swe-agent's tool-calling config), for that client only.
A client whose actions cannot be judged as commands (smolagents' CodeAgent writes Python programs) is recognised
with the reason, and each of its acting turns is counted as ungoverned
(`allowlist_proxy_ungoverned_text_actions_total`), as is any action a format recognises but cannot read, and an
answer holding a fenced shell or code block for a request that offers no tools from a client nobody recognises
(`UNRECOGNISED`: counted, never blocked on a guess).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.enforce.actions import UNJUDGEABLE
from proxy.enforce.judging import judge_calls
from proxy.policy import LoadedPolicy
from proxy.policy.tools.profiles import ToolSet, offered_tools
from proxy.policy.verdict import ALLOW, REJECT, Verdict
from proxy.record import JudgedCall
from proxy.toolcalls.registry import TEXT_FORMATS
from proxy.toolcalls.text_actions import NO_CONTEXT, Stated
from proxy.toolcalls.text_aider import aider_stated, message_text
from proxy.toolcalls.text_dspy import declared_tools

__all__ = ["TEXT_CLIENTS", "UNRECOGNISED", "TextClient", "judge_text", "prompt_text", "recognise", "recognise_text",
           "ungoverned_reasons"]


@dataclass(frozen=True, slots=True)
class TextClient:
    name: str
    marker: re.Pattern[str]  # searched in the client-written text of the request
    formats: tuple[str, ...] = ()
    sentinels: tuple[str, ...] = ()
    ungoverned: str | None = None  # why this client's actions are not judged (counted instead)
    acts: re.Pattern[str] | None = None  # what an acting turn of an ungoverned client looks like
    # What its request states that its formats need (read from the client text and the conversation's messages).
    states: Callable[[str, Sequence[Any]], Stated] | None = None
    stated: Stated = NO_CONTEXT  # this request's, once recognised


def _dspy_stated(text: str, messages: Sequence[Any]) -> Stated:
    """The tools ReAct's instructions declare: read from its system message (its user message holds the trajectory,
    tool output included); a raw prompt has no roles."""
    system = "\n".join(message_text(m.get("content")) for m in messages
                       if isinstance(m, dict) and m.get("role") == "system")
    return Stated(tools=declared_tools(system if messages else text))


_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

TEXT_CLIENTS = (
    TextClient("mini-swe-agent", re.compile(r"mswea_bash_command"), ("mswea_bash_command",), (_SUBMIT,)),
    TextClient("bash-blocks", re.compile(r"(?i)exactly one bash code block"), ("bash_block",),
               (_SUBMIT, "echo MINI_SWE_AGENT_FINAL_OUTPUT")),
    # mini-swe-agent's tool-calling config (mini.yaml): a `bash` tool, and the same sentinel to end a run.
    TextClient("mini-swe-agent-tools", re.compile(re.escape(_SUBMIT) + r"`\.\s+Do not combine it"), (), (_SUBMIT,)),
    # Roo Code and Kilo Code's legacy prompt name themselves; their tags are Cline's with names of their own.
    # Anchored: unanchored, the lookahead's `.*` rescans the rest of the text from every start (quadratic).
    TextClient("roo-xml", re.compile(r"(?s)\A(?=.*<execute_command>\s*<command>).*\b(?:Roo|Kilo Code)\b"),
               ("roo_xml",)),
    TextClient("cline-xml", re.compile(r"<execute_command>\s*<command>"), ("cline_xml",)),
    TextClient("smolagents-code", re.compile(r"(?s)final_answer.*(?:<end_code>|</code>)"),
               ungoverned="smolagents CodeAgent runs Python programs, which are not judged as commands",
               acts=re.compile(r"<code>|```py")),
    # DSPy ReAct: its JSONAdapter's output structure, else its ChatAdapter's field headers (text_dspy.py).
    TextClient("dspy-react-json", re.compile(r'"next_tool_name": "\{next_tool_name\}'), ("dspy_json",),
               states=_dspy_stated),
    TextClient("dspy-react", re.compile(r"\[\[ ## next_tool_name ## \]\]"), ("dspy_chat",), states=_dspy_stated),
    # Open Interpreter's text mode (its `execution_instructions`, added to a model it gives no tools).
    TextClient("open-interpreter", re.compile(r"To execute code on the user's machine, write a markdown code block"),
               ("oi_blocks",)),
    # aider's edit formats, by their rules (text_aider.py); `diff-fenced` names the fence first.
    TextClient("aider-diff-fenced", re.compile(r"1\. The opening fence and code language, eg: \S+\n2\. The \*FULL\* "
                                               r"file path alone on a line"), ("aider_diff_fenced",),
               states=aider_stated),
    TextClient("aider-diff", re.compile(r"# \*SEARCH/REPLACE block\* Rules:"), ("aider_diff",), states=aider_stated),
    TextClient("aider-whole", re.compile(r"You MUST use this \*file listing\* format:"), ("aider_whole",),
               states=aider_stated),
    TextClient("aider-udiff", re.compile(r"Return edits similar to unified diffs that `diff -U0` would produce"),
               ("aider_udiff",), states=aider_stated),
)

# A fenced block in a language something runs: what a client nobody recognises may execute from an answer.
_CODE_FENCE = re.compile(
    r"(?im)^[ \t]{0,3}(?:```|~~~)[ \t]*(?:bash|sh|shell|zsh|fish|ksh|csh|console|terminal|shell-session|cmd|bat|"
    r"batch|powershell|ps1|pwsh|python3?|py|ipython|javascript|js|node|typescript|ts|ruby|rb|perl|php|r|"
    r"applescript|lua|go|rust|java|kotlin|swift|scala|julia|sql|c|cpp|c\+\+|csharp|cs)[ \t]*$")
UNRECOGNISED = TextClient(
    "unrecognised", re.compile(r"(?!)"),
    ungoverned="a request without tools from a client the proxy does not recognise: a fenced code block in its "
               "answer may be run by it", acts=_CODE_FENCE)


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
            parts.append(message_text(message.get("content")))
    return "\n".join(parts)


def recognise(messages: Sequence[Any]) -> TextClient | None:
    return recognise_text(_client_text(messages), messages)


def recognise_text(text: str, messages: Sequence[Any] = ()) -> TextClient | None:
    """The client whose marker its own text holds, with what its request states (`TextClient.stated`)."""
    client = next((client for client in TEXT_CLIENTS if client.marker.search(text)), None)
    if client is not None and client.states is not None:
        client = dataclasses.replace(client, stated=client.states(text, messages))
    return client


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
        reasons += TEXT_FORMATS[name].read(text, client.stated).unreadable
    return reasons


def declared_tool_set(client: TextClient, tools: ToolSet | None) -> ToolSet | None:
    """The tools a client's prompt declares (DSPy ReAct) as the judge sees them, with the request's roots and
    protocol commands; None where it declares none (the request's own tool set judges)."""
    if not client.stated.tools or tools is None:
        return None
    declared = ToolSet(table=tools.table, offered=offered_tools({"tools": list(client.stated.tools)}),
                       user_agent=tools.user_agent, extra_roots=tools.extra_roots, exact=tools.exact)
    declared.select()
    return declared


def judge_text(policy: LoadedPolicy, client: TextClient, text: str, *, tools: ToolSet | None,
               session_id: str | None, pieces: Sequence[str] | None = None) -> list[JudgedCall]:
    """The verdicts of the actions this client would run from `text` (delivered in `pieces`): a sentinel of the
    client is allowed verbatim; everything else is judged as the tool its format maps (where the policy's
    `shell.exact` applies), or as the tool the client's prompt declares (offered: any other is `unknown_tool`)."""
    exact = set(client.sentinels)
    declared = declared_tool_set(client, tools)
    offered = set(declared.offered or ()) if declared is not None else None
    out: list[JudgedCall] = []
    for name in client.formats:
        for call in TEXT_FORMATS[name].read(text, client.stated, pieces).calls:
            command = call.arguments.get("command") if call.arguments else None
            if call.error is not None:  # a spelling the client's releases read differently: refused
                out.append(JudgedCall(call, Verdict(REJECT, (UNJUDGEABLE,), f"{UNJUDGEABLE}:{call.name[:40]}")))
            elif isinstance(command, str) and command.strip() in exact:
                out.append(JudgedCall(call, Verdict(ALLOW, (), "exact")))
            else:
                out += judge_calls(policy, [call], offered, tools=declared or tools, session_id=session_id,
                                   repair=False)
    return out
