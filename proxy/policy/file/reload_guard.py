"""Whether a reloaded policy file may replace the one being served: no file cut short ever becomes the policy.

An editor or `kubectl cp` writes a file in pieces, and a prefix of a policy is often itself a valid policy
(YAML fills in what is missing from defaults): a cut after `edit: filePath` drops the `write` path rule and
lets `write /etc/cron.d/x` through. A reload is therefore taken only when one of these holds:
- the file ends with YAML's document end marker `...` (a prefix cannot: the marker is the last line), or
- it keeps every top-level section the served file wrote out, and it allows nothing the served policy
  rejects: each call of a probe set built from both files (their scripts and flags, path tools, shell tools,
  examples, absolute and escaping paths, a tool neither names) judged by both, and the mode not moved from
  enforce to observe.
So a narrowing edit takes effect at once. An edit that allows more (or changes what the statistics count:
`loop_min_attempts`, proxy/policy/file/widening.py) is never applied by the live reload:
the served policy is not the agent's to change, and an agent that can write the file (or a prefix of it)
could widen it. It is held (reported in /policies and the log) and applied only when the operator sends
SIGHUP to the serving process; a file that lacks sections the served one has is refused unless it ends
with `...`. `reload_verdict` is the one decision: the live reload, SIGHUP and
`allowlist-proxy check --reload-against SERVED --policy NEW` all call it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from ..judge import judge_call
from ..schema import Policy, ToolExample
from .loader import LoadedPolicy
from .widening import widenings

__all__ = ["ReloadVerdict", "reload_problem", "reload_verdict"]

_FIXED_COMMANDS = (
    "cat /etc/passwd", "curl http://example.com", "rm -rf /", "uv run scripts/search.py | head -5",
    "uv run python -c 'print(1)'", "bash -c 'id'", "cd .. && ls",
)
_ESCAPING_PATHS = ("/etc/passwd", "/etc/cron.d/job", "../outside.txt", "~/.ssh/id_rsa")
# Protected places (writes and secrets): a reload that drops one from `protected:` widens the policy.
_PROTECTED_PATHS = ("scripts/new.py", "pyproject.toml", "uv.lock", ".git/config", ".venv/x.pth", ".claude/x.json",
                    ".env", "id_rsa", ".aws/credentials", "AGENTS.md", "sitecustomize.py")
_UNNAMED_TOOL = "allowlist_proxy_probe_tool"


@dataclass(frozen=True)
class ReloadVerdict:
    """`apply` (take it now), `hold` (it widens: only SIGHUP applies it) or `refuse` (it may be cut short).
    `widens`: what a held edit allows that the served policy does not, one line each (the diff an operator reads
    before applying it)."""

    action: Literal["apply", "hold", "refuse"]
    reason: str | None = None
    widens: tuple[str, ...] = ()


def reload_verdict(current: LoadedPolicy, candidate: LoadedPolicy, *, explicit: bool = False) -> ReloadVerdict:
    """What a reload does with `candidate` while `current` serves; `explicit`: the operator asked (SIGHUP)."""
    if candidate.hash == current.hash:
        return ReloadVerdict("apply")
    missing = sorted(s for s in current.sections - candidate.sections)
    if missing and not candidate.complete:
        return ReloadVerdict("refuse", f"the file lacks section(s) {', '.join(missing)} that the served policy "
                                       "has: it may be cut short; end it with a line `...` to confirm")
    if explicit:
        return ReloadVerdict("apply")
    widened = _widenings(current.policy, candidate.policy)
    if widened:
        return ReloadVerdict("hold", f"the new file allows what the served policy rejects or changes what the "
                                     f"statistics count ({widened[0]}): held, not applied; send SIGHUP to the "
                                     "serving process to apply it", widens=tuple(widened))
    return ReloadVerdict("apply")


def reload_problem(current: LoadedPolicy, candidate: LoadedPolicy) -> str | None:
    """None when a live reload applies `candidate` at once; else why not (for /policies and the log)."""
    return reload_verdict(current, candidate).reason


# A held edit's summary names at most this many widenings (the first is the one the reason names).
_MAX_WIDENINGS = 20


def _widenings(old: Policy, new: Policy) -> list[str]:
    """What `new` allows that `old` does not ([] for none): the switches and keys read by their meaning, else
    the first sample call `new` allows and `old` rejects."""
    found = []
    if old.mode == "enforce" and new.mode != "enforce":
        found.append(f"mode {new.mode}")
    if old.protected.own_files and not new.protected.own_files:
        found.append("protected.own_files off")
    # Keys read by their meaning first: sample calls miss what they do not touch (a host, a scheme, a profile).
    found += widenings(old, new)
    if found:
        return found[:_MAX_WIDENINGS]
    for tool, arguments in _probes(old, new):
        try:
            # The served policy is asked only about what the new one allows: most probes are refused by both.
            if judge_call(new, tool, arguments).allowed and not judge_call(old, tool, arguments).allowed:
                return [f"{tool} {_brief(arguments)} is allowed"]
        except Exception:  # judging fails closed: an error in either is no widening to report
            continue
    return []


def _brief(arguments: dict[str, Any]) -> str:
    text = repr(arguments)
    return text if len(text) <= 80 else text[:77] + "..."


def _probes(old: Policy, new: Policy) -> Iterator[tuple[str, dict[str, Any]]]:
    policies = (old, new)
    commands: list[str] = list(_FIXED_COMMANDS)
    for policy in policies:
        bash = getattr(policy, "bash", None)
        scripts = getattr(bash, "scripts", None) or {}
        scripts_dir = getattr(bash, "scripts_dir", "scripts")
        for name, rule in scripts.items():
            commands.append(f"uv run {scripts_dir}/{name}.py")
            commands.extend(f"uv run {scripts_dir}/{name}.py {flag} 1" for flag in getattr(rule, "flags", []))
        commands.append(f"uv run {scripts_dir}/not_a_listed_script.py")
    shell_tools: set[tuple[str, str]] = set()
    for policy in policies:
        bash = getattr(policy, "bash", None)
        for tool in getattr(bash, "tools", None) or []:
            shell_tools.add((tool, getattr(bash, "command_argument", "command")))
    for tool, argument in sorted(shell_tools):
        for command in commands:
            yield tool, {argument: command}
        yield tool, {argument: "uv run scripts/search.py", "workdir": "../elsewhere"}
    path_tools: set[tuple[str, str]] = set()
    for policy in policies:
        paths = getattr(policy, "paths", None)
        # `paths:` is PathRules (project roots and the older tool -> argument map), or a plain map.
        tool_map = getattr(paths, "tools", paths) or {}
        for tool, arguments in tool_map.items():
            for argument in [arguments] if isinstance(arguments, str) else list(arguments):
                path_tools.add((tool, argument))
    for tool, argument in sorted(path_tools):
        for path in _ESCAPING_PATHS + _PROTECTED_PATHS:
            yield tool, {argument: path, "content": "x", "oldString": "a", "newString": "b"}
    yield _UNNAMED_TOOL, {"value": "x"}
    for policy in policies:
        examples = getattr(policy, "examples", None)
        for example in [*getattr(examples, "allow", []), *getattr(examples, "reject", [])]:
            if isinstance(example, ToolExample):
                # Null arguments are malformed under every policy: nothing a reload could widen.
                if example.arguments is not None:
                    yield example.tool, dict(example.arguments)
            else:
                for tool, argument in sorted(shell_tools):
                    yield tool, {argument: example}
