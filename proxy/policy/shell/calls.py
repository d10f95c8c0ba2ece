"""The shell capability of a call: every command it runs, its working directory, interpreter and environment."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..call import BadArguments, Call, Finding
from ..paths.inside import path_value_problem
from ..paths.protected import protected_problem
from .decision import judge_command
from .shell_forms import KNOWN_SHELLS, commands_of

__all__ = ["shell_findings"]

_POSIX_SHELLS = frozenset(s for s in KNOWN_SHELLS if s.rsplit("/", 1)[-1] in ("bash", "sh", "dash", "zsh"))


def shell_findings(call: Call) -> Iterator[Finding]:
    shell = call.map.shell
    if shell is None:
        return
    values = call.values(shell.source)
    if len(values) != 1 and not (call.command_optional and not values):
        raise BadArguments  # the command argument is missing
    # A classified tool's command argument may be optional (Kilo's `background_process {action: list}`
    # runs nothing); given, it is judged like any shell tool's.
    commands = commands_of(values[0][1], each=shell.commands is not None) if values else []
    if commands is None:
        raise BadArguments
    if values and not commands:
        yield Finding(("empty",), "empty", command=True)
    for command in commands:
        verdict = judge_command(call.policy, command, roots=call.roots, exact=call.exact)
        if not verdict.allowed:
            yield Finding(verdict.reasons, verdict.shape, command=True)
    if shell.workdir:
        for label, value in call.values(shell.workdir):
            if not isinstance(value, str) or "\x00" in value:
                raise BadArguments
            # A command run inside `.git/hooks` or the scripts dir writes there as surely as a write tool.
            problem = path_value_problem(value, call.roots) or protected_problem(call.policy, value, call.roots)
            if problem is not None:
                yield call.found(problem, label)
    if shell.interpreter:
        for label, value in call.values(shell.interpreter):
            if not isinstance(value, str):
                raise BadArguments
            # The judged language means the same in these shells only; any other program given the
            # command text (`curl -lc TEXT`, `python3 -c TEXT`) runs something else entirely.
            if value not in _POSIX_SHELLS and value not in shell.shells:  # exactly a shell, by name or system path
                yield call.found("wrapper", label)
    if shell.env:
        for label, value in call.values(shell.env):
            if not isinstance(value, Mapping):
                raise BadArguments
            if value:  # variables set for the command change what it does, like `VAR=x cmd`
                yield call.found("assignment", label)
