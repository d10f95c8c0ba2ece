"""The commands a shell tool's arguments ask for, as the strings the bash rules judge.

A client puts its command in one of three forms: a string (`{"command": "uv run ..."}`), a list of
strings that each run (`{"commands": [...]}`), or an argv array that runs without a shell (`["uv", "run",
"scripts/x.py"]`) or through one (`["bash", "-lc", "uv run ..."]`). The shell's string is judged as it
is; a plain argv becomes the one command line a shell would run with exactly those words, so the rules
see the same program, script and flags.

Only an argv is unwrapped: there the shell is the argv form the client's own tool builds (Codex runs
`exec_command`'s `cmd` as `["bash", "-lc", cmd]`). A command *string* that starts another shell
(`bash -c 'uv run ...'`) is the model starting a shell of its own: judged whole, it is a `wrapper`.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["KNOWN_SHELLS", "argv_command", "commands_of", "shell_script"]

# The shells whose `-c STRING` runs STRING (the judged language means the same in each of them), by the names a
# client's argv or `shell` field gives them: bare (looked up on PATH) or at a system path. Any other path
# (`scripts/x/bash`, `./tools/bash`, `/tmp/bash`) is a program of the project's or the model's own.
_SHELL_NAMES = ("bash", "sh", "dash", "zsh", "ksh", "ash")
_SHELL_DIRS = ("/bin", "/usr/bin", "/usr/local/bin", "/opt/homebrew/bin", "/usr/pkg/bin", "/run/current-system/sw/bin")
KNOWN_SHELLS = frozenset(_SHELL_NAMES) | frozenset(f"{d}/{n}" for d in _SHELL_DIRS for n in _SHELL_NAMES)
# Options before `-c` that change nothing the rules look at: a login shell (`-l`, `--login`) and the
# combined forms Codex and others send (`-lc`, `-cl`).
_LOGIN = frozenset({"-l", "--login"})
_WITH_C = re.compile(r"-[l]*c[l]*")
# A word that a shell passes on unchanged when written bare (the lexer's unquoted alphabet).
_BARE = re.compile(r"[A-Za-z0-9_./:,+@%-]+")


def _quote(word: str) -> str | None:
    if _BARE.fullmatch(word) and not word.startswith("="):
        return word
    if "'" not in word:
        return f"'{word}'"
    if not any(c in word for c in '"$`\\!'):
        return f'"{word}"'
    return None


def shell_script(argv: list[str]) -> str | None:
    """STRING of an argv `bash|sh ... [-l] -c|-lc STRING` (always its last word); None for any other argv."""
    if argv and argv[0] in KNOWN_SHELLS:
        rest = argv[1:]
        while rest and rest[0] in _LOGIN:
            rest = rest[1:]
        if len(rest) == 2 and _WITH_C.fullmatch(rest[0]):
            return rest[1]
    return None


def argv_command(argv: list[str]) -> str | None:
    """The command line an argv amounts to; None when no word-for-word command line exists."""
    script = shell_script(argv)
    if script is not None:
        return script
    words = [_quote(word) for word in argv]
    if not words or any(w is None for w in words):
        return None
    return " ".join(w for w in words if w is not None)


def commands_of(value: Any, *, each: bool) -> list[str] | None:
    """The command strings in a shell argument; None when the value is not a command in any form.

    `each`: a list is a list of commands (`run_commands`), else a list is one argv.
    """
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    if each:
        return list(value)
    command = argv_command(value)
    # An argv that no command line spells (a word with both quote kinds and a `$`) is judged as the
    # joined words, which the rules refuse for what they contain.
    return [command if command is not None else " ".join(value)]
