"""The decision for one command line: exactly an allowed `uv run scripts/<name>.py [args]`, or explained.

The lexer and matcher decide; the script's argument rules judge its arguments; tree-sitter-bash explains a
rejection (never turning it into an allow). Whatever breaks inside fails closed (`parse_error`).
"""

from __future__ import annotations

from collections.abc import Collection

import structlog

from ..schema import Policy
from ..verdict import ALLOW, REJECT, Verdict
from .explain import explain_command, parse_error_verdict
from .matcher import matcher_for
from .script_args import argument_problem

__all__ = ["ALLOWED", "judge_command"]

_log = structlog.get_logger("proxy.policy")
ALLOWED = Verdict(ALLOW, (), None)


def judge_command(policy: Policy, command: str, *, roots: tuple[str, ...] = (),
                  exact: Collection[str] = ()) -> Verdict:
    """Allow only what the decision lexer accepts, with arguments its script's rules accept (`roots`: the
    project roots a path argument may name), or an exact command the policy lists (or `exact`, the protocol
    commands of the client the request comes from); explain everything else."""
    if command in policy.bash.exact or command in exact:
        return ALLOWED
    try:
        matcher = matcher_for(policy)
        argv = matcher.argv(command)
        if argv is not None:
            if len(argv) == 3:
                return ALLOWED
            problem = argument_problem(policy, argv, roots)
            return ALLOWED if problem is None else Verdict(REJECT, problem[0], problem[1])
    except Exception:  # a bug here must still fail closed
        _log.exception("policy.decision_failed")
        return parse_error_verdict()
    return explain_command(matcher, command)
