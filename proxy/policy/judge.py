"""Judging: one bash command, or one tool call of any tool, against a policy."""

from __future__ import annotations

from typing import Any

import structlog

from .explain import explain_command, parse_error_verdict
from .matcher import matcher_for
from .paths import path_problem
from .reasons import order_reasons
from .schema import Policy
from .verdict import ALLOW, MALFORMED, REJECT, Verdict

__all__ = ["judge_call", "judge_command"]

_log = structlog.get_logger("proxy.policy")
_ALLOWED = Verdict(ALLOW, (), None)


def judge_command(policy: Policy, command: str) -> Verdict:
    """Allow only what the decision lexer accepts; explain everything else."""
    try:
        matcher = matcher_for(policy)
        if matcher.argv(command) is not None:
            return _ALLOWED
    except Exception:  # a bug here must still fail closed
        _log.exception("policy.decision_failed")
        return parse_error_verdict()
    return explain_command(matcher, command)


def _bad_arguments(also: tuple[str, ...] = ()) -> Verdict:
    return Verdict(MALFORMED, ("bad_arguments", *also), "bad_arguments")


def judge_call(
    policy: Policy, tool: str, arguments: dict[str, Any] | None, *, offered_tools: set[str] | None = None
) -> Verdict:
    """The verdict for one tool call.

    A call to a tool the request did not offer is `unknown_tool` whatever its arguments; arguments that are
    not a JSON object (None: they did not parse) make the call `malformed`, carrying `unknown_tool` too
    when both apply.
    """
    unknown = offered_tools is not None and tool not in offered_tools
    if not isinstance(arguments, dict):
        return _bad_arguments(("unknown_tool",) if unknown else ())
    if unknown:
        return Verdict(REJECT, ("unknown_tool",), f"unknown_tool:{str(tool)[:40]}")
    rules = policy.bash
    if tool in rules.tools:
        command = arguments.get(rules.command_argument)
        if not isinstance(command, str):
            return _bad_arguments()
        verdict = judge_command(policy, command)
        workdir = arguments.get(rules.workdir_argument) if rules.workdir_argument else None
        if workdir is None:
            return verdict
        if not isinstance(workdir, str) or "\x00" in workdir:
            return _bad_arguments()
        problem = path_problem(workdir)
        if problem is None:
            return verdict
        if verdict.allowed:
            return Verdict(REJECT, (problem,), f"{problem}:{tool}.{rules.workdir_argument}")
        return Verdict(REJECT, order_reasons((*verdict.reasons, problem)), verdict.shape)
    names = policy.path_arguments(tool)
    if names:
        problems: list[str] = []
        first: str | None = None
        for name in names:
            value = arguments.get(name)
            if value is None:
                continue
            if not isinstance(value, str) or "\x00" in value:
                return _bad_arguments()
            problem = path_problem(value)
            if problem is not None:
                problems.append(problem)
                first = first or f"{problem}:{tool}.{name}"
        if problems:
            return Verdict(REJECT, order_reasons(problems), first)
        return _ALLOWED
    if policy.other_tools == "reject":
        return Verdict(REJECT, ("unknown_tool",), f"unknown_tool:{str(tool)[:40]}")
    return _ALLOWED
