"""Judging: one bash command, or one tool call of any tool, against a policy.

A call is judged by the capabilities its tool carries (proxy/policy/profiles.py): the shell rules for the
commands a shell tool runs, the path rules for the files a file tool opens, `other_tools` for the rest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import structlog

from .content import content_findings, path_value_problem
from .explain import explain_command, parse_error_verdict
from .globs import compile_glob
from .matcher import matcher_for
from .on_disk import searched_secret
from .paths import patch_paths
from .profiles import HEURISTIC_PROFILE, Rule, ToolSet, call_rules, misfit_rules, profile_table
from .protected import glob_problem, protected_for, protected_problem
from .reasons import order_reasons
from .schema import Policy, ShellMap
from .script_args import argument_problem
from .shell_forms import commands_of
from .urls import is_url, url_problem
from .verdict import ALLOW, MALFORMED, REJECT, Verdict

__all__ = ["call_command", "judge_call", "judge_command", "tool_set"]

_log = structlog.get_logger("proxy.policy")
_ALLOWED = Verdict(ALLOW, (), None)


class _BadArguments(Exception):
    """An argument a rule reads is not of a type the tool could use."""


def judge_command(policy: Policy, command: str, *, roots: tuple[str, ...] = ()) -> Verdict:
    """Allow only what the decision lexer accepts, with arguments its script's rules accept (`roots`: the
    project roots a path argument may name), or an exact command the policy lists; explain everything else."""
    if command in policy.bash.exact:
        return _ALLOWED
    try:
        matcher = matcher_for(policy)
        argv = matcher.argv(command)
        if argv is not None:
            if len(argv) == 3:
                return _ALLOWED
            problem = argument_problem(policy, argv, roots)
            return _ALLOWED if problem is None else Verdict(REJECT, problem[0], problem[1])
    except Exception:  # a bug here must still fail closed
        _log.exception("policy.decision_failed")
        return parse_error_verdict()
    return explain_command(matcher, command)


def _bad_arguments(also: tuple[str, ...] = ()) -> Verdict:
    return Verdict(MALFORMED, ("bad_arguments", *also), "bad_arguments")


def tool_set(policy: Policy) -> ToolSet:
    """The tools as judged when nothing is known about the request (CLI checks, rechecks, examples)."""
    return ToolSet(table=profile_table(policy))


_MISSING = object()
_GLOB_CHARS = re.compile(r"[*?\[{]")
_POSIX_SHELLS = frozenset({"bash", "sh", "dash", "zsh"})


def _values(arguments: Any, spec: str) -> list[tuple[str, Any]]:
    """The values at an argument path (`file_path`, `operation.path`, `files[].path`, `paths[]`) with the
    label each is reported under; an absent key gives nothing, a wrong container type is bad arguments."""
    if "." not in spec and "[" not in spec:  # a top-level argument: most of them
        if not isinstance(arguments, Mapping):
            raise _BadArguments
        value = arguments.get(spec)
        return [] if value is None else [(spec, value)]
    tokens = [t for t in spec.replace("[]", ".[]").split(".") if t]
    found: list[tuple[str, Any]] = [("", arguments)]
    for token in tokens:
        step: list[tuple[str, Any]] = []
        for label, value in found:
            if token == "[]":
                if not isinstance(value, list):
                    raise _BadArguments
                step += [(f"{label}[{i}]", item) for i, item in enumerate(value)]
            else:
                if not isinstance(value, Mapping):
                    raise _BadArguments
                item = value.get(token, _MISSING)
                if item is not _MISSING and item is not None:
                    step.append((f"{label}.{token}" if label else token, item))
        found = step
    return found


def _paths(value: Any) -> list[str]:
    """A path argument's paths: a string, or a list of strings."""
    if isinstance(value, str) and "\x00" not in value:
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) and "\x00" not in v for v in value):
        return list(value)
    raise _BadArguments


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
            return _ALLOWED
        return Verdict(REJECT, order_reasons(self.reasons), self.shape)


def _judge_shell(policy: Policy, tool: str, shell: ShellMap, arguments: Mapping[str, Any], roots: tuple[str, ...],
                 found: _Findings, *, optional: bool = False) -> None:
    values = _values(arguments, shell.source)
    if len(values) != 1 and not (optional and not values):
        raise _BadArguments  # the command argument is missing
    # A classified tool's command argument may be optional (Kilo's `background_process {action: list}`
    # runs nothing); given, it is judged like any shell tool's.
    commands = commands_of(values[0][1], each=shell.commands is not None) if values else []
    if commands is None:
        raise _BadArguments
    if values and not commands:
        found.add(("empty",), "empty", command=True)
    for command in commands:
        verdict = judge_command(policy, command, roots=roots)
        if not verdict.allowed:
            found.add(verdict.reasons, verdict.shape, command=True)
    if shell.workdir:
        for label, value in _values(arguments, shell.workdir):
            if not isinstance(value, str) or "\x00" in value:
                raise _BadArguments
            # A command run inside `.git/hooks` or the scripts dir writes there as surely as a write tool.
            problem = path_value_problem(value, roots) or protected_problem(policy, value, roots)
            if problem is not None:
                found.add((problem,), f"{problem}:{tool}.{label}")
    if shell.interpreter:
        for label, value in _values(arguments, shell.interpreter):
            if not isinstance(value, str):
                raise _BadArguments
            # The judged language means the same in these shells only; any other program given the
            # command text (`curl -lc TEXT`, `python3 -c TEXT`) runs something else entirely.
            if value.rsplit("/", 1)[-1] not in _POSIX_SHELLS:
                found.add(("wrapper",), f"wrapper:{tool}.{label}")
    if shell.env:
        for label, value in _values(arguments, shell.env):
            if not isinstance(value, Mapping):
                raise _BadArguments
            if value:  # variables set for the command change what it does, like `VAR=x cmd`
                found.add(("assignment",), f"assignment:{tool}.{label}")


def _judge_rule(policy: Policy, rule: Rule, arguments: Mapping[str, Any], roots: tuple[str, ...],
                found: _Findings) -> None:
    tool_map, tool = rule.map, rule.tool
    if tool_map.shell is not None:
        # A command argument found by classification may be absent (nothing runs); a profile's may not.
        _judge_shell(policy, tool, tool_map.shell, arguments, roots, found,
                     optional=rule.content or rule.profile == HEURISTIC_PROFILE)
    # `paths` may be written (a map that does not say counts as writing: fail closed), `read_paths` only read;
    # a writing tool reads too, so it is judged against both protected lists.
    for specs, write in ((tool_map.paths, True), (tool_map.read_paths, False)):
        for spec in specs:
            for label, value in _values(arguments, spec):
                for path in _paths(value):
                    problem = path_value_problem(path, roots) or protected_problem(policy, path, roots, write=write)
                    if problem is not None:
                        found.add((problem,), f"{problem}:{tool}.{label}")
    _judge_search(policy, rule, arguments, roots, found)
    for spec in tool_map.urls:
        for label, value in _values(arguments, spec):
            for url in _paths(value):
                problem = url_problem(url, policy.urls)
                if problem is not None:
                    found.add((problem,), f"{problem}:{tool}.{label}")
    for spec in tool_map.patch:
        for label, value in _values(arguments, spec):
            if not isinstance(value, str):
                raise _BadArguments
            for path in patch_paths(value):
                problem = ((path_value_problem(path, roots) or protected_problem(policy, path, roots))
                           if "\x00" not in path else "path_escape")
                if problem is not None:
                    found.add((problem,), f"{problem}:{tool}.{label}")


def _judge_search(policy: Policy, rule: Rule, arguments: Mapping[str, Any], roots: tuple[str, ...],
                  found: _Findings) -> None:
    """Filter globs (`globs`: what they could select) and searched directories (`searches`: read paths, and
    the protected files on this machine the search's filters select; left out, the project root)."""
    tool_map, tool = rule.map, rule.tool
    if not (tool_map.globs or tool_map.searches):
        return
    filters: list[str] = []
    for spec in tool_map.globs:
        for label, value in _values(arguments, spec):
            for glob in _paths(value):
                filters.append(glob)
                problem = glob_problem(policy, glob, roots)
                if problem is not None:
                    found.add((problem,), f"{problem}:{tool}.{label}")
    for spec in tool_map.searches:
        given = _values(arguments, spec)
        for label, value in given or [(spec, ".")]:
            for directory in _paths(value):
                # Left out, the search is of the project root: no path to judge, only what lies below it.
                problem = (path_value_problem(directory, roots)
                           or protected_problem(policy, directory, roots, write=False)) if given else None
                if problem is None and roots and searched_secret(protected_for(policy), directory.strip() or ".",
                                                                 filters, roots):
                    problem = "protected_path"
                if problem is not None:
                    found.add((problem,), f"{problem}:{tool}.{label}")


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
        return _ALLOWED
    found = _Findings()
    roots = tools.roots
    try:
        for rule in rules:
            _judge_rule(policy, rule, arguments, roots, found)
    except _BadArguments:
        return _bad_arguments()
    if content:
        judged = frozenset(spec for rule in rules for spec in rule.judges)

        def protected(value: str) -> str | None:
            problem = protected_problem(policy, value, roots)
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
            values = _values(arguments, shell.source)
            commands = commands_of(values[0][1], each=shell.commands is not None) if len(values) == 1 else None
            return "\n".join(commands) if commands is not None else None
    except Exception:
        return None
    return None
