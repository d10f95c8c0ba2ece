"""Output the proxy judges that is not a plain function call: Responses API action items, and output it
cannot judge at all.

Action items (`local_shell_call`, `shell_call`, `apply_patch_call`, `custom_tool_call`, `computer_call`) become
`ToolCall`s
whose name is the item type (a custom tool's own name) and whose arguments are the item's action object as
the API gives it, so the store shows what the model asked for. The built-in `openai-responses` tool profile
maps them onto the policy: commands onto the shell rules (an argv, `bash -lc STRING` unwrapped to STRING),
a working directory and the files a patch touches onto the path rules, what a computer-use action types onto
the keyboard rules (judged as a command line; a click refused).

Anything else that could carry an action and that the proxy does not know (an unknown item or event type,
a legacy `function_call`, data after the end of a response) becomes an `unjudgeable` call: rejected with
the reason code `unjudgeable`, so that enforce mode never relays it and every mode records it.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.enforce.judging import judge_calls
from proxy.policy import LoadedPolicy
from proxy.policy.tools.profiles import ToolSet
from proxy.policy.verdict import REJECT, Verdict
from proxy.record import JudgedCall
from proxy.toolcalls import ToolCall

__all__ = ["ACTION", "ACTION_ITEMS", "UNJUDGEABLE", "action_call", "judge_output", "unjudgeable_call"]

UNJUDGEABLE = "unjudgeable"  # the ToolCall source, and the reason code
ACTION = "responses_action"  # the ToolCall source of a Responses action item
# Item type -> the field holding its action, as the Responses API names them.
ACTION_ITEMS = {"local_shell_call": "action", "shell_call": "action", "apply_patch_call": "operation",
                "custom_tool_call": None, "computer_call": "action"}


def unjudgeable_call(name: str, detail: str, content: Any = None) -> ToolCall:
    """A stand-in for output the proxy cannot judge: `name` says what it was, `detail` why."""
    try:
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)[:4000]
    except (TypeError, ValueError):
        text = repr(content)[:4000]
    return ToolCall(name=name[:200], arguments_text=text, arguments=None, source=UNJUDGEABLE, error=detail)


def action_call(item: dict[str, Any], index: int) -> ToolCall:
    """A Responses action item as a ToolCall (the item's type as name, its action object as arguments)."""
    kind = str(item.get("type"))
    arguments: Any
    if kind == "custom_tool_call":
        name, arguments = item.get("name"), {"input": item.get("input")}
        name = name if isinstance(name, str) else kind
    else:
        name, arguments = kind, item.get(ACTION_ITEMS.get(kind) or "action")
    call_id = item.get("call_id") or item.get("id")
    text = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(name=name, arguments_text=text, arguments=arguments if isinstance(arguments, dict) else None,
                    source=ACTION, id=call_id if isinstance(call_id, str) else None, index=index,
                    error=None if isinstance(arguments, dict) else "the item has no action object", raw=kind)


def judge_output(policy: LoadedPolicy, calls: list[ToolCall], offered: set[str] | None, *,
                 tools: ToolSet | None = None, session_id: str | None = None,
                 repair: bool = True) -> list[JudgedCall]:
    """Verdicts for an attempt's calls, in order, all from the one judge (proxy/enforce/judging.py): function calls
    against the offered tools; action items through the tool profiles (the `openai-responses` profile maps
    them onto the shell and paths capabilities; a Responses request offers them as built-in tools, not by
    name, so they are never `unknown_tool`); `unjudgeable` for the rest. An action item that asks to run as
    another user is refused: no capability describes that."""
    plain = [c for c in calls if c.source not in (UNJUDGEABLE, ACTION)]
    judged_plain = iter(judge_calls(policy, plain, offered, tools=tools, session_id=session_id, repair=repair))
    out: list[JudgedCall] = []
    for call in calls:
        if call.source == UNJUDGEABLE:
            out.append(JudgedCall(call, Verdict(REJECT, (UNJUDGEABLE,), f"{UNJUDGEABLE}:{call.name[:40]}")))
        elif call.source == ACTION:
            if isinstance(call.arguments, dict) and call.arguments.get("user"):
                out.append(JudgedCall(call, Verdict(REJECT, ("wrapper",), "wrapper:user")))
                continue
            (item,) = judge_calls(policy, [call], None, tools=tools, session_id=session_id, repair=False)
            out.append(item)
        else:
            out.append(next(judged_plain))
    return out
