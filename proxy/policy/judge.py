"""Judging: one bash command, or one tool call of any tool, against a policy.

A call is judged by the capabilities its tool carries (proxy/policy/tools/profiles.py): the shell rules for the
commands a shell tool runs, the path rules for the files a file tool opens, `other_tools` for the rest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import structlog

from .call import BadArguments, Call, Check
from .paths.calls import patch_findings, path_findings, search_findings
from .paths.globs import compile_glob
from .paths.protected import protected_for, protected_problem
from .reasons import order_reasons
from .schema import Policy
from .shell.calls import shell_findings
from .shell.decision import ALLOWED, judge_command
from .shell.explain import parse_error_verdict
from .shell.keyboard import keyboard_findings
from .shell.shell_forms import commands_of
from .tools.content import content_findings
from .tools.profiles import HEURISTIC_PROFILE, ToolSet, call_rules, misfit_rules, profile_table
from .urls.calls import url_findings
from .urls.rules import is_url
from .verdict import MALFORMED, REJECT, Verdict

__all__ = ["CHECKS", "call_command", "judge_call", "judge_command", "tool_set"]

_log = structlog.get_logger("proxy.policy")

# Every check a governed tool's call goes through, in this order (the first shape found is the call's): a new
# check on a tool call is a module in its room and one line here (docs/DESIGN.md "Where to change what").
CHECKS: list[Check] = [
    shell_findings,  # shell: the commands it runs, its workdir, interpreter and environment
    keyboard_findings,  # shell: what a computer-use or key-typing tool types
    path_findings,  # paths: the files it writes or reads
    search_findings,  # paths: the filters and directories a search reads
    url_findings,  # urls: the URLs it fetches
    patch_findings,  # paths: the files a patch names
]


def _bad_arguments(also: tuple[str, ...] = ()) -> Verdict:
    return Verdict(MALFORMED, ("bad_arguments", *also), "bad_arguments")


def tool_set(policy: Policy) -> ToolSet:
    """The tools as judged when nothing is known about the request (CLI checks, rechecks, examples)."""
    return ToolSet(table=profile_table(policy))


_GLOB_CHARS = re.compile(r"[*?\[{]")


class _Findings:
    """Reasons collected over every rule and argument of one call; the first shape found is kept."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.shape: str | None = None
        self.command_shape = False

    def add(self, reasons: tuple[str, ...], shape: str | None, *, command: bool = False) -> None:
        self.reasons += reasons
        # A rejected command's shape names the blocked form; it outranks the shape of a path problem.
        if shape is not None and (self.shape is None or (command and not self.command_shape)):
            self.shape, self.command_shape = shape, command or self.command_shape

    def verdict(self) -> Verdict:
        if not self.reasons:
            return ALLOWED
        return Verdict(REJECT, order_reasons(self.reasons), self.shape)


def judge_call(policy: Policy, tool: str, arguments: dict[str, Any] | None, *,
               offered_tools: set[str] | None = None, tools: ToolSet | None = None) -> Verdict:
    """The verdict for one tool call: the one judging entry point, behind the proxy
    (proxy.enforce.judging.judge_calls), `allowlist-proxy check` and `allowlist-proxy recheck`.

    A call to a tool the request did not offer is `unknown_tool` whatever its arguments; arguments that are
    not a JSON object (None: they did not parse) make the call `malformed`, carrying `unknown_tool` too
    when both apply. `tools` is the request's tool set (which profiles apply, the project roots); without
    it every map that fits the call's arguments applies. Whatever breaks inside gives `parse_error` (reject).
    """
    try:
        return _judge_call(policy, tool, arguments, offered_tools, tools)
    except Exception:  # judging fails closed, whatever broke
        _log.exception("policy.judge_failed", tool=str(tool)[:40])
        return parse_error_verdict()


def _judge_call(policy: Policy, tool: str, arguments: dict[str, Any] | None, offered_tools: set[str] | None,
                tools: ToolSet | None) -> Verdict:
    unknown = offered_tools is not None and tool not in offered_tools
    if not isinstance(arguments, dict):
        return _bad_arguments(("unknown_tool",) if unknown else ())
    if unknown:
        return Verdict(REJECT, ("unknown_tool",), f"unknown_tool:{str(tool)[:40]}")
    if tools is None:
        tools = tool_set(policy)
    # A known tool of no capability (`todowrite`) is what `other_tools` governs; a tool no profile
    # describes is also judged by its arguments' whole values (`content`), and one whose schema could not
    # be read by what each call's arguments are.
    every = tools.rules(tool, arguments)
    content = [rule for rule in every if rule.content]
    if any(not rule.readable for rule in content):
        every = [r for rule in every for r in (call_rules(rule, arguments) if not rule.readable else [rule])]
    extra = [r for rule in every if rule.declared is not None for r in misfit_rules(rule, arguments)]
    if extra:
        every = [*every, *extra]  # a new list: `every` may be the tool set's own
    if any(rule.unaddressable for rule in every):
        return _bad_arguments()  # a command, path or URL under a name no rule can read: not judged, refused
    rules = [rule for rule in every if rule.governed]
    if not rules and policy.other_tools == "reject":
        return Verdict(REJECT, ("unknown_tool",), f"unknown_tool:{str(tool)[:40]}")
    if not rules and not content:
        return ALLOWED
    found = _Findings()
    roots = tools.roots
    try:
        for rule in rules:
            call = Call(policy, rule.tool, rule.map, arguments, roots,
                        command_optional=rule.content or rule.profile == HEURISTIC_PROFILE, exact=tools.exact)
            for check in CHECKS:
                for finding in check(call):
                    found.add(finding.reasons, finding.shape, command=finding.command)
    except BadArguments:
        return _bad_arguments()
    if content:
        judged = frozenset(spec for rule in rules for spec in rule.judges)

        def protected(value: str) -> str | None:
            problem = protected_problem(policy, value, roots, imports=True)
            if problem is None and _GLOB_CHARS.search(value) and not is_url(value):
                # A one-word value with wildcards may be a filter (`*.pem`, `{.env,x}`): judged as one.
                problem = "protected_path" if protected_for(policy).glob_selects(compile_glob(value), value) else None
            return problem

        for problem, label in content_findings(arguments, roots, policy.urls, judged, protected):
            found.add((problem,), f"{problem}:{tool}.{label}")
    return found.verdict()


def call_command(policy: Policy, tool: str, arguments: Any, *, tools: ToolSet | None = None) -> str | None:
    """The command a shell call runs (several on separate lines), as the judge reads it: the one reading of
    "the command a call carries" for display, the record, the feedback and the loops. None for any other
    call, and for arguments it cannot read (only for display: a call it cannot show is shown without it)."""
    if not isinstance(arguments, Mapping):
        return None
    try:
        for rule in (tools or tool_set(policy)).rules(tool, arguments):
            shell = rule.map.shell
            if shell is None:
                continue
            values = Call(policy, tool, rule.map, arguments, ()).values(shell.source)
            commands = commands_of(values[0][1], each=shell.commands is not None) if len(values) == 1 else None
            return "\n".join(commands) if commands is not None else None
    except Exception:
        return None
    return None
