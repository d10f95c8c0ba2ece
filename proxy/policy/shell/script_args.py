"""The arguments of an allowed script, judged by its rules (`shell.scripts.<name>.args`).

A positional or a flag's value may be ruled `path` (inside the project), `url` (the policy's `urls:`, or
its own lists), `int`, `any`, `{enum: [...]}` or `{regex: ...}`. Without a rule a value is still refused
when it is, whole, a path outside the project (absolute outside the roots, `..`, `~`, `file://`) or a URL
the policy refuses: the allowlist is about what runs, and an allowed script given `/etc/shadow` reads it.
Inside the project too: an unruled value that names a protected read (`.env`, `.git/config`) is
`protected_path`, as a read tool's would be (`uv run scripts/summarize.py .env` reads the secret).
"""

from __future__ import annotations

import re

from ..paths.inside import path_value_problem
from ..paths.protected import glob_problem, protected_problem
from ..schema import ArgEnum, ArgRegex, ArgRule, ArgUrl, Policy, ScriptRule
from ..tools.content import value_problem
from ..urls.rules import url_problem

__all__ = ["argument_problem"]

_INT = re.compile(r"[+-]?[0-9]+")
_WILDCARDS = re.compile(r"[*?\[{]")


def _free_problem(value: str, policy: Policy, roots: tuple[str, ...]) -> str | None:
    """An unruled value: a path outside the project or a refused URL (`value_problem`), or the name of a
    protected read inside it. Text with spaces or line breaks is a query, not a name."""
    problem = value_problem(value, roots, policy.urls)
    if problem is not None:
        return problem
    stripped = value.strip()
    if not stripped or any(c.isspace() for c in stripped) or "://" in stripped:
        return None
    return protected_problem(policy, stripped, roots, write=False)


def _reasons(problem: str) -> tuple[str, ...]:
    return ("argument",) if problem == "argument" else ("argument", problem)


def _rule_problem(rule: ArgRule, value: str, policy: Policy, roots: tuple[str, ...]) -> str | None:
    if rule == "any":
        return None
    if rule == "int":
        return None if _INT.fullmatch(value) else "argument"
    if rule == "path":
        if "\x00" in value or "://" in value or value.lower().startswith("file:"):
            return "argument"
        # Padded, look-alike or variable-led spellings (` /etc/x`, `／etc`, `$HOME/x`) too; a script may
        # write what its path argument names: a protected file is refused like a write tool's.
        problem = path_value_problem(value, roots) or protected_problem(policy, value, roots)
        if problem is None and _WILDCARDS.search(value):
            problem = glob_problem(policy, value, roots)  # a script that globs its path reads what that names
        return problem
    if rule == "url":
        return url_problem(value, policy.urls)
    if isinstance(rule, ArgUrl):
        return url_problem(value, rule.url)
    if isinstance(rule, ArgEnum):
        return None if value in rule.enum else "argument"
    if isinstance(rule, ArgRegex):
        return None if re.fullmatch(rule.regex, value) else "argument"
    return "argument"


def argument_problem(policy: Policy, argv: list[str], roots: tuple[str, ...]) -> tuple[tuple[str, ...], str] | None:
    """(reasons, shape) for the first argument of an allowed command that fails its rule, else None.
    `argv` is the matcher's: `uv run <dir>/<name>.py ARGS...`."""
    script = argv[2].rsplit("/", 1)[-1][: -len(".py")]
    spec = policy.bash.scripts.get(script)
    args = spec.args if isinstance(spec, ScriptRule) else None
    ruled_flags = args.flags if args is not None else {}
    positional = args.positional if args is not None else None
    index = 3
    position = 0
    while index < len(argv):
        word = argv[index]
        index += 1
        rule: ArgRule | None = None
        label: str
        if word.startswith("-"):
            flag, eq, value = word.partition("=")
            if flag not in ruled_flags:
                problem = _free_problem(value, policy, roots) if eq else None
                if problem is not None:
                    return _reasons(problem), f"argument:{script}.{flag}"
                continue
            rule, label = ruled_flags[flag], flag
            if not eq:
                if index >= len(argv):
                    return ("argument",), f"argument:{script}.{flag}"  # a ruled flag without its value
                value = argv[index]
                index += 1
        else:
            value, label = word, f"#{position + 1}"
            if isinstance(positional, list):
                if position >= len(positional):
                    return ("argument",), f"argument:{script}.{label}"  # more positionals than ruled
                rule = positional[position]
            else:
                rule = positional
            position += 1
        problem = (_rule_problem(rule, value, policy, roots) if rule is not None
                   else _free_problem(value, policy, roots))
        if problem is not None:
            return _reasons(problem), f"argument:{script}.{label}"
    return None
