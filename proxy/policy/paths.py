"""File paths a tool would open (and a shell tool's workdir): inside the project, or refused.

A relative path is taken from the project root; an absolute one passes only under one of the project
roots (`paths.project_root`, or the root a request header names), after `.` and `..` are resolved.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

__all__ = ["normal_root", "patch_paths", "path_problem"]

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


def normal_root(root: str) -> str | None:
    """A project root as it compares: absolute, `.`/`..` resolved, no trailing slash; None if unusable."""
    if not isinstance(root, str) or not root.startswith("/") or "\x00" in root or "\\" in root:
        return None
    normal = posixpath.normpath(root)
    if normal.startswith("//"):  # POSIX leaves a leading `//` alone; it names the same place as `/`
        normal = "/" + normal.lstrip("/")
    return None if normal == "/" else normal


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
