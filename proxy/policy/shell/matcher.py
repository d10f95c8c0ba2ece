"""The policy side of the decision: `uv run <scripts_dir>/<identifier>.py` with allowed scripts and flags.

Compiled once per policy (a frozen model, so the compiled form never goes stale) and cached on it. The
whole decision is one anchored regex over the text plus a look at the argument words: no parser.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from ..schema import Policy, compiled_for
from .lexer import WORD_PATTERN, split_words, unquote_word, unquote_words
from .text import visible_non_ascii

__all__ = ["Matcher", "matcher_for"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _ScriptListing:
    """The `<name>.py` files of `scripts_path`, re-listed only when the directory changes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._mtime: int | None = None
        self._names: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def names(self) -> frozenset[str]:
        try:
            mtime = os.stat(self.directory).st_mtime_ns
        except OSError:
            return frozenset()
        if mtime != self._mtime:
            with self._lock:
                names: set[str] = set()
                try:
                    with os.scandir(self.directory) as entries:
                        for entry in entries:
                            stem, dot, ext = entry.name.rpartition(".")
                            # An exact, case-sensitive name: a case-insensitive file system must not let
                            # `Search.py` stand in for `search.py`.
                            if dot and ext == "py" and _IDENT.fullmatch(stem) and entry.is_file():
                                names.add(stem)
                except OSError:
                    return frozenset()
                self._names, self._mtime = frozenset(names), mtime
        return self._names


class Matcher:
    """Everything the decision needs from one policy, precomputed."""

    def __init__(self, policy: Policy) -> None:
        rules = policy.bash
        self.max_length = rules.max_command_length
        self.scripts_dir = rules.scripts_dir
        self.listed: dict[str, frozenset[str]] = {
            name: (frozenset(rule.flags) if rule is not None else frozenset()) for name, rule in rules.scripts.items()
        }
        # Relative to the directory the proxy runs in, like the default `policies/strict.yaml`.
        self.listing = _ScriptListing(Path(rules.scripts_path).absolute()) if rules.scripts_path else None
        self._re = re.compile(
            rf" *+uv ++run ++{re.escape(rules.scripts_dir)}/([A-Za-z_][A-Za-z0-9_]*+)\.py((?: ++{WORD_PATTERN})*+) *+\Z"
        )

    def flags_for(self, script: str) -> frozenset[str] | None:
        """The declared flags of an allowed script; None when the script is not allowed."""
        flags = self.listed.get(script)
        if flags is None and self.listing is not None and script in self.listing.names():
            return frozenset()
        return flags

    def script_names(self) -> list[str]:
        names = set(self.listed)
        if self.listing is not None:
            names.update(self.listing.names())
        return sorted(names)

    def argv(self, command: str) -> list[str] | None:
        """The argv when the command is allowed, else None. This is the whole decision."""
        if type(command) is not str or len(command) > self.max_length:
            return None
        m = self._re.match(command)
        if m is None:
            return None
        if not command.isascii() and not visible_non_ascii(command):
            return None
        script = m.group(1)
        flags = self.flags_for(script)
        if flags is None:
            return None
        rest = m.group(2)
        if '"' in rest or "'" in rest:
            args = unquote_words(split_words(rest))
            if args is None:
                return None
        else:
            # Only safe characters and spaces remain here, so splitting on spaces is the shells' split.
            args = [a for a in rest.split(" ") if a]
            if "=" in rest and any(unquote_word(a) is None for a in args if "=" in a):
                return None
        for arg in args:
            # After quote removal: a quoted flag is still a flag, and `--flag=value` is `--flag`.
            if arg[:1] == "-" and arg.split("=", 1)[0] not in flags:
                return None
        return ["uv", "run", f"{self.scripts_dir}/{script}.py", *args]


def matcher_for(policy: Policy) -> Matcher:
    return compiled_for(policy, "_compiled", policy.bash, Matcher)
