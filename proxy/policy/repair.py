"""Opt-in safe repair: a rejected bash call delivered in its repaired form, when the policy says so.

A policy's `repair:` lists the transformations an operator accepts (DESIGN.md "Safe repair"):
- `output_filters`: drop trailing `| head ...`, `| tail ...`, `| grep ...` (and the other filters of core.py);
- `stderr_redirect`: drop `2>&1`;
- `timeout`: drop a leading `timeout N`;
- `cd_workdir`: turn `cd DIR && CMD` into CMD with the tool's workdir argument set to DIR.
A call is repaired only when every layer peeled off it is listed (any other redirect or wrapper means
no repair) and the repaired call is allowed by the same judge as any call, workdir included. The
trade-off: the model is not told it broke the rule, so it may keep writing the filtered form; the call
is recorded as `repaired` (an error in the error rate) with the original and the repaired command.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from .core import find_core
from .judge import judge_call
from .schema import Policy

__all__ = ["Repair", "repair_call"]


@dataclass(frozen=True, slots=True)
class Repair:
    arguments: dict[str, Any]  # the call's arguments, repaired
    command: str  # the repaired command
    steps: tuple[str, ...]  # the transformations applied, by their policy names


def repair_call(policy: Policy, tool: str, arguments: Any) -> Repair | None:
    """The repaired form of a rejected bash call, when the policy allows every step and the result."""
    accepted = set(policy.repair)
    rules = policy.bash
    if not accepted or tool not in rules.tools or not isinstance(arguments, dict):
        return None
    command = arguments.get(rules.command_argument)
    if not isinstance(command, str):
        return None
    core = find_core(command)
    if core is None or not core.removed <= accepted:
        return None  # `redirect` and `wrapper` are never in the list: those calls are not repaired
    repaired = dict(arguments)
    repaired[rules.command_argument] = core.command
    if core.cd_dir is not None:
        if rules.workdir_argument is None:
            return None
        base = arguments.get(rules.workdir_argument)
        if base is not None and not isinstance(base, str):
            return None
        # `cd` from the workdir the call already had; the path rules then judge the result.
        repaired[rules.workdir_argument] = posixpath.normpath(posixpath.join(base or "", core.cd_dir))
    if not judge_call(policy, tool, repaired).allowed:
        return None
    return Repair(repaired, core.command, tuple(sorted(core.removed)))
