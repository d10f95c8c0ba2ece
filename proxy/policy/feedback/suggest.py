"""The nearest allowed command for a rejected call, computed by the policy engine and judged again.

Three kinds, tried in this order (docs/decisions/0022):
1. `core`: the command wraps an allowed script call in output filters, redirects, wrappers or `cd DIR &&`;
   the suggestion is that call alone (`core.py` peels the layers). A script run another way
   (`python3 scripts/search.py x`, `uv run search.py x`) is also given as `uv run scripts/search.py x`.
2. `replacement`: the program is one a script replaces (`instead_of` in the policy): that script, with the
   program's one positional argument carried over when there is exactly one (`curl -s URL` ->
   `uv run scripts/fetch_page.py URL`); without a concrete command when the argument is ambiguous.
3. `scripts`: an unknown script, flag, script path or uv runner: the real scripts with their descriptions
   and flags.

Every concrete command is judged by the same decision as any call; one that is not allowed is never
offered. Anything else (a `;` chain, a substitution, `rm -rf`) gets no suggestion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..judge import judge_call
from ..schema import Policy
from ..shell.matcher import matcher_for
from ..verdict import Verdict
from .core import Token, find_core, split_tokens

__all__ = ["Suggestion", "quote_word", "script_listing", "suggest"]

_SAFE_WORD = re.compile(r"[A-Za-z0-9_./:=,+@%-]+")
_SCRIPT_WORD = re.compile(r"(?:\./)*(?:([A-Za-z0-9_./-]+)/)?([A-Za-z_][A-Za-z0-9_]*)\.py")
_LAUNCHERS = (("uv", "run", "python3"), ("uv", "run", "python"), ("uv", "run"), ("python3",), ("python",), ())
_LISTED_REASONS = frozenset({"unknown_script", "flag", "script_path", "runner"})


@dataclass(frozen=True, slots=True)
class Suggestion:
    kind: str  # core | replacement | scripts
    text: str  # the sentence the model reads
    command: str | None = None  # the concrete allowed command, when there is one
    arguments: dict[str, Any] | None = None  # the call's arguments with that command

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "command": self.command, "text": self.text}


def quote_word(value: str) -> str | None:
    """A word every shell reads as `value`: bare when safe, else single or double quotes; None if neither."""
    if _SAFE_WORD.fullmatch(value) and not value.startswith("=") and value[:1] != "-":
        return value
    if value and "'" not in value and value.isprintable():
        return f"'{value}'"
    if value and not any(c in value for c in '"$`\\!') and value.isprintable():
        return f'"{value}"'
    return None


def script_listing(policy: Policy) -> str:
    """The allowed scripts as a model should read them: command, flags, description."""
    matcher = matcher_for(policy)
    parts = []
    for name in matcher.script_names():
        rule = policy.bash.scripts.get(name)
        flags = sorted(matcher.flags_for(name) or ())
        text = f"`uv run {policy.bash.scripts_dir}/{name}.py`"
        if flags:
            text += f" (flags: {', '.join(flags)})"
        if rule is not None and rule.description:
            text += f" - {rule.description.strip()}"
        parts.append(text)
    return "; ".join(parts)


def _allowed(policy: Policy, tool: str, arguments: dict[str, Any], command: str) -> dict[str, Any] | None:
    """The call's arguments with `command`, when that call is allowed (workdir kept as it was)."""
    new = dict(arguments)
    new[policy.bash.command_argument] = command
    return new if judge_call(policy, tool, new).allowed else None


def _as_script_call(policy: Policy, words: list[Token]) -> str | None:
    """`python3 scripts/x.py a`, `uv run x.py a`, `./scripts/x.py a` -> `uv run scripts/x.py a`."""
    values = [w.value for w in words]
    for launcher in _LAUNCHERS:
        n = len(launcher)
        if tuple(values[:n]) != launcher or len(values) <= n:
            continue
        m = _SCRIPT_WORD.fullmatch(values[n])
        if m is None:
            continue
        folder, name = m.group(1), m.group(2)
        if folder not in (None, policy.bash.scripts_dir) or matcher_for(policy).flags_for(name) is None:
            return None
        rest = [w.text for w in words[n + 1 :]]
        return " ".join([f"uv run {policy.bash.scripts_dir}/{name}.py", *rest])
    return None


def _core(policy: Policy, tool: str, arguments: dict[str, Any], command: str) -> Suggestion | None:
    core = find_core(command)
    if core is not None and (found := _allowed(policy, tool, arguments, core.command)):
        return Suggestion("core", f"Run `{core.command}` alone: its whole output comes back to you.",
                          core.command, found)
    tokens = split_tokens(command) or []
    words = core.words if core is not None else tokens if all(t.kind == "word" for t in tokens) else []
    candidate = _as_script_call(policy, words) if words else None
    if candidate is not None and (found := _allowed(policy, tool, arguments, candidate)):
        return Suggestion("core", f"Run `{candidate}` instead: scripts run only as "
                          f"`uv run {policy.bash.scripts_dir}/<name>.py`.", candidate, found)
    return None


def _replacement(policy: Policy, tool: str, arguments: dict[str, Any], command: str) -> Suggestion | None:
    core = find_core(command)
    tokens = core.words if core is not None else split_tokens(command)
    if not tokens or any(t.kind != "word" for t in tokens):
        return None
    program = tokens[0].value.rsplit("/", 1)[-1]
    matcher = matcher_for(policy)
    for name in matcher.script_names():
        rule = policy.bash.scripts.get(name)
        if rule is None or program not in rule.instead_of:
            continue
        script = f"uv run {policy.bash.scripts_dir}/{name}.py"
        about = f" ({rule.description.strip()})" if rule.description else ""
        positional = [t for t in tokens[1:] if not t.value.startswith("-")]
        if any(t.value.strip("./").startswith(policy.bash.scripts_dir) for t in positional):
            return None  # looking at the scripts themselves: the listing answers that
        if len(positional) == 1 and positional[0] is tokens[-1] and (word := quote_word(positional[0].value)):
            candidate = f"{script} {word}"
            if found := _allowed(policy, tool, arguments, candidate):
                return Suggestion("replacement", f"Run `{candidate}` instead of {program}{about}.", candidate, found)
        return Suggestion("replacement", f"Use `{script} ...` instead of {program}{about}.")
    return None


def _looks_at_scripts(policy: Policy, command: str) -> bool:
    """`ls scripts/`, `cat scripts/search.py | grep ...`: the model is looking for what it may run."""
    words = [t for t in split_tokens(command) or [] if t.kind == "word"]
    return any(w.value.strip("./").startswith(policy.bash.scripts_dir) for w in words[1:2])


def suggest(policy: Policy, tool: str, arguments: Any, verdict: Verdict) -> Suggestion | None:
    """The nearest allowed way for a rejected bash call, or None when there is no safe one."""
    if verdict.allowed or tool not in policy.bash.tools or not isinstance(arguments, dict):
        return None
    command = arguments.get(policy.bash.command_argument)
    if not isinstance(command, str):
        return None
    try:
        found = _core(policy, tool, arguments, command) or _replacement(policy, tool, arguments, command)
        listing_helps = _LISTED_REASONS.intersection(verdict.reasons[:1]) or _looks_at_scripts(policy, command)
        if found is None and listing_helps and (listed := script_listing(policy)):
            found = Suggestion("scripts", f"The scripts that exist: {listed}.")
        return found
    except Exception:  # a suggestion is a courtesy: it must never break the feedback
        return None
