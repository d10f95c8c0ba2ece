"""Which keys of a policy edit may allow more: the structural half of the widening check of a reload.

Probing a policy with sample calls finds only the widenings its samples touch: `urls.allow_hosts: [169.254.
169.254]`, `urls.schemes: [file]`, `shell.scripts_path: /tmp`, `repair: [...]` or a custom profile that
maps a client's shell tool to nothing allow more while every probe judges the same. So every changed key is
read here by its meaning, and a key whose direction is not known counts as widening (fail closed):

- lists that allow (`urls.allow_hosts`, `urls.schemes`, `paths.project_root`, `repair`, `passthrough_routes`,
  a script's `flags`, `secrets.allow`, `shell.tools`-like lists ...): an added item widens, a removed one narrows;
- lists that refuse (`urls.deny_hosts`, `protected.write`, `protected.read`): a removed item widens;
- maps that allow (`shell.scripts`): an added key widens, a removed one narrows, a kept one is compared by
  the rules of its own keys;
- switches: `mode` enforce -> observe, `other_tools` reject -> allow, a `protected.*` switch,
  `urls.resolve` or `secrets.redact` turned off, a longer `shell.max_command_length`;
- text the model reads or names (`name`, `description`, `feedback`, `feedback_variants`, `examples`,
  `retry_budget`, a script's `description` / `instead_of`) change nothing allowed;
- what the statistics count (`loop_min_attempts`; a statistics window added later belongs here): any change,
  either way, is held like a widening - raised to 100 it would empty the loop figures live;
- anything else that changed (`profiles`, `builtin_profiles`, `shell.scripts_dir`, `shell.scripts_path`,
  a script's argument rules, the shell argument names, keys added later) widens unless proven otherwise.

`widenings(old, new)` lists the changed keys that widen, each with the direction it moved; [] means the
edit only narrows or changes text.
"""

from __future__ import annotations

from collections.abc import Iterator
from fnmatch import fnmatchcase
from typing import Any

from ..schema import Policy

__all__ = ["widenings"]

# Key patterns (dotted, `*` one map key) and how their change is read; the first pattern that matches wins.
_NEUTRAL = ("name", "description", "feedback", "feedback.*", "feedback_variants", "examples", "retry_budget",
            "bash.scripts.*.description", "bash.scripts.*.instead_of")
_COUNTING = ("loop_min_attempts",)
_ALLOW_LISTS = ("urls.allow_hosts", "urls.schemes", "paths.project_root", "repair", "passthrough_routes",
                "bash.scripts.*.flags", "secrets.allow", "protected.new_modules.allow")
_DENY_LISTS = ("urls.deny_hosts", "protected.write", "protected.read")
_ALLOW_MAPS = ("bash.scripts",)
_ON_NARROWS = ("protected.*", "urls.resolve", "secrets.redact")  # a switch that protects when on


def _matches(key: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(key, pattern) and key.count(".") == pattern.count(".") for pattern in patterns)


def _items(value: Any) -> set[str]:
    return {repr(item) for item in value} if isinstance(value, list) else {repr(value)}


def _walk(key: str, old: Any, new: Any) -> Iterator[str]:
    if old == new or _matches(key, _NEUTRAL):
        return
    if _matches(key, _COUNTING):
        yield f"{key}: {old} -> {new} (changes what the statistics count)"
        return
    if _matches(key, _ALLOW_LISTS):
        added = _items(new) - _items(old)
        if added:
            yield f"{key}: added {', '.join(sorted(added))}"
        return
    if _matches(key, _DENY_LISTS):
        removed = _items(old) - _items(new)
        if removed:
            yield f"{key}: removed {', '.join(sorted(removed))}"
        return
    if _matches(key, _ALLOW_MAPS) and isinstance(old, dict) and isinstance(new, dict):
        for name in sorted(set(new) - set(old)):
            yield f"{key}: added {name}"
        for name in sorted(set(new) & set(old)):
            yield from _walk(f"{key}.{name}", old[name] or {}, new[name] or {})
        return
    if key == "mode":
        if old == "enforce":
            yield f"mode: {old} -> {new}"
        return
    if key == "other_tools":
        if new == "allow":
            yield f"other_tools: {old} -> {new}"
        return
    if key == "bash.max_command_length":
        if isinstance(old, int) and isinstance(new, int) and new > old:
            yield f"{key}: {old} -> {new}"
        return
    if _matches(key, _ON_NARROWS) and isinstance(old, bool) and isinstance(new, bool):
        if old and not new:
            yield f"{key}: on -> off"
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for name in sorted(set(old) | set(new), key=str):
            yield from _walk(f"{key}.{name}" if key else str(name), old.get(name), new.get(name))
        return
    yield f"{key or 'policy'}: changed"


def widenings(old: Policy, new: Policy) -> list[str]:
    """The changed keys of `new` that may allow more than `old`, with how they moved; [] when none."""
    return list(_walk("", old.model_dump(mode="json"), new.model_dump(mode="json")))
