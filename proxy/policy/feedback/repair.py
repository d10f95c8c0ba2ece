"""Opt-in safe repair: a rejected shell call delivered in its repaired form, when the policy says so.

A policy's `repair:` lists the transformations an operator accepts (docs/decisions/0023):
- `output_filters`: drop trailing `| head ...`, `| tail ...`, `| grep ...` (and the other filters of core.py);
- `stderr_redirect`: drop `2>&1`;
- `timeout`: drop a leading `timeout N`;
- `cd_workdir`: turn `cd DIR && CMD` into CMD with the tool's workdir argument set to DIR.
A call is repaired only when every layer peeled off it is listed (any other redirect or wrapper means
no repair) and the repaired call is allowed by the same judge as any call, workdir included. The
trade-off: the model is not told it broke the rule, so it may keep writing the filtered form; the call
is recorded as `repaired` (an error in the error rate) with the original and the repaired command.

Any shell tool a profile maps (proxy/policy/tools/profiles.py) can be repaired, the command written back in the
tool's own shape: a command string stays a string; an argv `["bash", "-lc", CMD]` keeps its wrapper around
the repaired CMD; `cd_workdir` needs the profile's workdir argument (Claude Code's `Bash` has none, so its
`cd DIR && ...` is not repaired). Not repaired: a list of commands, a command string that is itself
`bash -lc '...'`, a plain argv (it has no pipe to strip), a tool only the schema heuristic calls a shell,
and a tool several different shell maps govern.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from ..judge import judge_call, tool_set
from ..schema import Policy, ShellMap
from ..shell.shell_forms import shell_script
from ..tools.profiles import HEURISTIC_PROFILE, ToolSet
from .core import find_core

__all__ = ["Repair", "repair_call"]


@dataclass(frozen=True, slots=True)
class Repair:
    arguments: dict[str, Any]  # the call's arguments, repaired
    command: str  # the repaired command
    steps: tuple[str, ...]  # the transformations applied, by their policy names


def repair_call(policy: Policy, tool: str, arguments: Any, *, tools: ToolSet | None = None,
                offered: set[str] | None = None) -> Repair | None:
    """The repaired form of a rejected shell call, when the policy allows every step and the result.

    `tools` and `offered` are the request's (None: nothing known, every map that fits applies); the repaired
    call is judged with them, as the call itself was."""
    accepted = set(policy.repair)
    if not accepted or not isinstance(arguments, dict):
        return None
    tools = tools if tools is not None else tool_set(policy)
    shell = _shell_map(tools, tool, arguments)
    if shell is None:
        return None
    found = _command(shell, arguments)
    if found is None:
        return None
    command, write = found
    core = find_core(command)
    if core is None or not core.removed <= accepted:
        return None  # `redirect` and `wrapper` are never in the list: those calls are not repaired
    repaired = dict(arguments)
    repaired[shell.source] = write(core.command)
    if core.cd_dir is not None:
        workdir = shell.workdir
        if workdir is None or not _top_level(workdir):
            return None
        base = arguments.get(workdir)
        if base is not None and not isinstance(base, str):
            return None
        # `cd` from the workdir the call already had; the path rules then judge the result.
        repaired[workdir] = posixpath.normpath(posixpath.join(base or "", core.cd_dir))
    if not judge_call(policy, tool, repaired, offered_tools=offered, tools=tools).allowed:
        return None
    return Repair(repaired, core.command, tuple(sorted(core.removed)))


def _top_level(spec: str) -> bool:
    return "." not in spec and "[" not in spec


def _shell_map(tools: ToolSet, tool: str, arguments: dict[str, Any]) -> ShellMap | None:
    """The one shell map governing the call, from a profile or the policy's own `bash:` keys."""
    rules = [rule for rule in tools.rules(tool, arguments) if rule.governed]
    if any(rule.profile == HEURISTIC_PROFILE for rule in rules):
        return None  # a guessed shell is judged, never rewritten
    shells: list[ShellMap] = []
    for rule in rules:
        shell = rule.map.shell
        if shell is not None and shell not in shells:
            shells.append(shell)
    if len(shells) != 1 or shells[0].commands is not None or not _top_level(shells[0].source):
        return None
    return shells[0]


def _command(shell: ShellMap, arguments: dict[str, Any]) -> tuple[str, Any] | None:
    """The command the call runs, and how a repaired command is written back in the argument's shape."""
    value = arguments.get(shell.source)
    if shell.command is not None:
        if not isinstance(value, str):
            return None
        return value, lambda command: command
    if not isinstance(value, list) or not all(isinstance(word, str) for word in value):
        return None
    script = shell_script(value)
    if script is None:
        return None
    return script, lambda command: [*value[:-1], command]
