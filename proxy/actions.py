"""Output the proxy judges that is not a plain function call: Responses API action items, and output it
cannot judge at all.

Action items (`local_shell_call`, `shell_call`, `apply_patch_call`, `custom_tool_call`) become `ToolCall`s
whose name is the item type (a custom tool's own name) and whose arguments are the item's action object as
the API gives it, so the store shows what the model asked for. `judge_action` maps them onto the policy:
commands onto the bash rules (an argv joined with shell quoting, `bash -lc STRING` unwrapped to STRING), a
working directory and the files a patch touches onto the path rules. It is the one place the tool-profile
work (issue 15) replaces.

Anything else that could carry an action and that the proxy does not know (an unknown item or event type,
a legacy `function_call`, data after the end of a response) becomes an `unjudgeable` call: rejected with
the reason code `unjudgeable`, so that enforce mode never relays it and every mode records it.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from proxy.judging import JudgedCall, judge_calls
from proxy.policy import LoadedPolicy, judge_call
from proxy.policy.judge import judge_command
from proxy.policy.paths import path_problem
from proxy.policy.reasons import order_reasons
from proxy.policy.verdict import MALFORMED, REJECT, Verdict
from proxy.toolcalls import ToolCall

__all__ = ["ACTION", "ACTION_ITEMS", "UNJUDGEABLE", "action_call", "judge_action", "judge_output",
           "unjudgeable_call"]

UNJUDGEABLE = "unjudgeable"  # the ToolCall source, and the reason code
ACTION = "responses_action"  # the ToolCall source of a Responses action item
# Item type -> the field holding its action, as the Responses API names them.
ACTION_ITEMS = {"local_shell_call": "action", "shell_call": "action", "apply_patch_call": "operation",
                "custom_tool_call": None}
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "/bin/bash", "/bin/sh", "/bin/zsh", "/usr/bin/bash",
                     "/usr/bin/env bash"})
_PATCH_PATHS = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.*)$", re.MULTILINE)


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


def judge_output(policy: LoadedPolicy, calls: list[ToolCall], offered: set[str] | None) -> list[JudgedCall]:
    """Verdicts for an attempt's calls, in order: the one judge for function calls, the action mapping for
    action items, `unjudgeable` for the rest."""
    judged_plain = iter(judge_calls(policy, [c for c in calls if c.source not in (UNJUDGEABLE, ACTION)], offered))
    out: list[JudgedCall] = []
    for call in calls:
        if call.source == UNJUDGEABLE:
            out.append(JudgedCall(call, Verdict(REJECT, (UNJUDGEABLE,), f"{UNJUDGEABLE}:{call.name[:40]}")))
        elif call.source == ACTION:
            out.append(JudgedCall(call, judge_action(policy, call, offered)))
        else:
            out.append(next(judged_plain))
    return out


def judge_action(policy: LoadedPolicy, call: ToolCall, offered: set[str] | None) -> Verdict:
    """The local mapping of an action item onto the policy (replaced by the tool profiles of issue 15)."""
    arguments = call.arguments
    if not isinstance(arguments, dict):
        return Verdict(MALFORMED, ("bad_arguments",), "bad_arguments")
    try:
        if call.raw in ("local_shell_call", "shell_call"):
            return _judge_shell(policy, call.raw, arguments)
        if call.raw == "apply_patch_call":
            path = arguments.get("path")
            return _judge_paths(call.name, [path] if path is not None else [])
        # custom_tool_call: a freeform patch (Codex's apply_patch grammar) is judged by the files it touches;
        # any other custom tool by the policy's rules for a tool of that name.
        text = arguments.get("input")
        if isinstance(text, str) and "*** Begin Patch" in text:
            return _judge_paths(call.name, _PATCH_PATHS.findall(text))
        return judge_call(policy.policy, call.name, arguments, offered_tools=offered)
    except Exception:  # judging must fail closed, whatever broke
        return Verdict(REJECT, ("parse_error",), "parse_error")


def _shell_commands(kind: str, action: dict[str, Any]) -> list[str] | None:
    if kind == "shell_call":
        commands = action.get("commands")
        if isinstance(commands, str):
            commands = [commands]
        if not isinstance(commands, list) or not commands or not all(isinstance(c, str) for c in commands):
            return None
        return [_unwrap(c) for c in commands]
    argv = action.get("command")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return None
    if len(argv) == 3 and argv[0] in _SHELLS and argv[1] in ("-c", "-lc", "-l -c"):
        return [argv[2]]
    command = shlex.join(argv)
    env = action.get("env")
    if isinstance(env, dict) and env:  # the lexer rejects assignments, as it should
        command = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items()) + " " + command
    if action.get("user"):
        command = f"sudo -u {shlex.quote(str(action['user']))} {command}"
    return [command]


def _unwrap(command: str) -> str:
    """`bash -lc '<cmd>'` -> `<cmd>` when the wrapper is exactly that; anything else stays as it is."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if len(words) == 3 and words[0] in _SHELLS and words[1] in ("-c", "-lc"):
        return words[2]
    return command


def _judge_shell(policy: LoadedPolicy, kind: str, action: dict[str, Any]) -> Verdict:
    commands = _shell_commands(kind, action)
    if commands is None:
        return Verdict(MALFORMED, ("bad_arguments",), "bad_arguments")
    workdir = action.get("working_directory") or action.get("workdir")
    for command in commands:
        verdict = judge_command(policy.policy, command)
        if not verdict.allowed:
            return verdict
    if workdir is not None:
        return _judge_paths(kind, [workdir])
    return verdict


def _judge_paths(tool: str, paths: list[Any]) -> Verdict:
    problems: list[str] = []
    first: str | None = None
    for path in paths:
        if not isinstance(path, str) or not path or "\x00" in path:
            return Verdict(MALFORMED, ("bad_arguments",), "bad_arguments")
        problem = path_problem(path.strip())
        if problem is not None:
            problems.append(problem)
            first = first or f"{problem}:{tool}"
    if problems:
        return Verdict(REJECT, order_reasons(problems), first)
    return Verdict("allow", (), None)
