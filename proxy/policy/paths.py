"""File-path arguments of non-bash tools (and bash's workdir): inside the project, relative, or refused."""

from __future__ import annotations

import re

__all__ = ["path_problem"]

# `C:`, `C:\x`, `C:/x`: absolute (or drive-relative) on Windows, never a plain project path; and a URL
# (`file:///etc/passwd`) names a place of its own.
_DRIVE = re.compile(r"[A-Za-z]:|[A-Za-z][A-Za-z0-9+.-]*://")


def path_problem(value: str) -> str | None:
    """`absolute_path`, `path_escape` or None for a path a tool would open relative to the project.

    `~` and `~user` are escapes (the home directory); `..` components are followed and an escape is only
    a path that climbs above its start, so `a/../b` stays allowed while `a/../../x` does not. Backslashes
    count as separators, since a tool on Windows or a careless join may treat them so.
    """
    if value.startswith(("/", "\\")) or _DRIVE.match(value):
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
