"""File paths a tool would open (and a shell tool's workdir): inside the project, or refused.

A relative path is taken from the project root; an absolute one passes only under one of the project
roots (`paths.project_root`, or the root a request header names), after `.` and `..` are resolved.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from ..roots import normal_root

__all__ = ["LOOKALIKES", "VARIABLE_PATH", "patch_paths", "path_problem", "path_value_problem"]

# `$HOME/x`, `${HOME}/x`, `%USERPROFILE%\\x`: a tool that expands variables opens a place outside the project.
VARIABLE_PATH = re.compile(r"^(?:\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|%[A-Za-z_][A-Za-z0-9_]*%)(?:[\\/]|$)")
# Characters that some library or file system reads as `/`, `\\` or `.` (NFKC maps the full-width ones;
# the division and fraction slashes and the two-dot leader are look-alikes a careless normaliser folds).
LOOKALIKES = str.maketrans({"\u2215": "/", "\u2044": "/", "\u2571": "/", "\u29f8": "/", "\u29f5": "\\",
                             "\u2216": "\\", "\u2025": "..", "\u2024": "."})

# `C:`, `C:\x`, `C:/x`: absolute (or drive-relative) on Windows, never a plain project path; and a URL
# (`file:///etc/passwd`) names a place of its own.
_DRIVE = re.compile(r"[A-Za-z]:|[A-Za-z][A-Za-z0-9+.-]*://")
# The file headers of the apply_patch format (Codex, OpenCode): `*** Update File: src/x.py`, ... Codex
# trims each line (Rust `trim`: any Unicode whitespace) before it looks for a header, OpenCode trims too;
# so a header is read after any leading or trailing space, and a line that looks like one but does not
# read cleanly (other spacing, case, invisible characters) is ambiguous: refused, not guessed.
_PATCH_FILE = re.compile(r"\*\*\* (Add File|Update File|Delete File|Move to|Move File): (.*)")
_PATCH_LIKE = re.compile(r"\*\*\*\s*(?:add|update|delete|move)\b", re.IGNORECASE)
_INVISIBLE = re.compile(r"[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")
# Marks a patch line that could be a header but is not one cleanly: judged as a path that escapes.
AMBIGUOUS_HEADER = "\x00"
# A unified diff's file headers, read only from a patch that is not in the apply_patch format.
_DIFF_FILE = re.compile(r"^(?:---|\+\+\+)[ \t]+(\S.*?)(?:\t.*)?[ \t]*$", re.MULTILINE)
# git's extended headers name files too: `git apply` renames and copies by them.
_GIT_FILE = re.compile(r"^(?:rename|copy) (?:from|to) (.+?)[ \t]*$|^diff --git (\S+) (\S+)[ \t]*$", re.MULTILINE)


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root + "/") for root in roots)


def path_problem(value: str, roots: Iterable[str] = ()) -> str | None:
    """`absolute_path`, `path_escape` or None for a path a tool would open.

    `~` and `~user` are escapes (the home directory); `..` components are followed and an escape is only
    a path that climbs above its start, so `a/../b` stays allowed while `a/../../x` does not. Backslashes
    count as separators, since a tool on Windows or a careless join may treat them so. An absolute path
    under a root passes once normalised; one that starts under a root and climbs out is an escape.
    """
    if value.startswith(("/", "\\")) or _DRIVE.match(value):
        roots = tuple(roots)
        if roots and value.startswith("/") and "\\" not in value:
            if _under(normal_root(value) or "/", roots):
                return None
            if _under(value.rstrip("/"), roots):
                return "path_escape"
        return "absolute_path"
    if value.startswith("~"):
        return "path_escape"
    depth = 0
    for part in re.split(r"[/\\]+", value):
        if part == "..":
            depth -= 1
            if depth < 0:
                return "path_escape"
        elif part and part != ".":
            depth += 1
    return None


def _patch_headers(text: str) -> list[str]:
    found: list[str] = []
    # splitlines: every line break any client's reader could split on (`\r`, `\v`, U+2028, ...).
    for line in text.splitlines():
        bare = _INVISIBLE.sub("", line).strip()
        if not bare.startswith("*"):
            continue
        match = _PATCH_FILE.fullmatch(bare)
        if match is not None and bare == line.strip() and match.group(2).strip():
            found.append(match.group(2).strip())
        elif _PATCH_LIKE.match(bare) and not bare.startswith(("*** Begin Patch", "*** End Patch", "*** End of File")):
            found.append(AMBIGUOUS_HEADER + bare)
    return found


def patch_paths(text: str) -> list[str]:
    """The files a patch names: apply_patch headers, else a unified diff's `---`/`+++` lines. A line that
    could be read as a header but not cleanly comes back starting with AMBIGUOUS_HEADER."""
    found = _patch_headers(text)
    if found or "*** Begin Patch" in text:
        return found
    names = _DIFF_FILE.findall(text)
    for renamed, left, right in _GIT_FILE.findall(text):
        names += [n for n in (renamed, left, right) if n]
    paths = []
    for name in names:
        if name == "/dev/null":
            continue
        # `a/x` and `b/x` are git's prefixes for the two sides, not directories.
        paths.append(name[2:] if name[:2] in ("a/", "b/") else name)
    return paths


def path_value_problem(value: str, roots: tuple[str, ...]) -> str | None:
    """`absolute_path`, `path_escape` or None for a value a rule says is a path: as sent, and as a tool that
    strips whitespace, folds Unicode look-alikes or expands a leading variable would open it."""
    problem = path_problem(value, roots)
    if problem is not None:
        return problem
    stripped = value.strip()
    if stripped != value and (problem := path_problem(stripped, roots)) is not None:
        return problem
    if not stripped.isascii():
        folded = unicodedata.normalize("NFKC", stripped.translate(LOOKALIKES))
        if folded != stripped and (problem := path_problem(folded, roots)) is not None:
            return problem
    return "path_escape" if VARIABLE_PATH.match(stripped) else None

