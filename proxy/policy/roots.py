"""What a project root is: an absolute directory, compared after `.` and `..` are resolved, and never a place
whose files are the machine's or the user's own rather than a project's (`root_problem`).

The terms every room shares: the policy file's `paths.project_root`, the tool profiles, the roots a client
states (proxy/sessions/project_root.py) and the roots a project key binds (proxy/keys/) all read a root this
one way.
"""

from __future__ import annotations

import posixpath

__all__ = ["normal_root", "root_problem"]

# The machine's own directories: nothing under them is a project whose files an agent may read and write.
_SYSTEM = ("/etc", "/usr", "/var", "/boot", "/proc", "/sys", "/dev", "/run", "/bin", "/sbin", "/lib", "/lib32",
           "/lib64", "/libx32")
# Where home directories live: `/root` itself is one; under the others, each child is one.
_HOME_PARENTS = ("/home", "/Users", "/var/home")


def normal_root(root: str) -> str | None:
    """A project root as it compares: absolute, `.`/`..` resolved, no trailing slash; None if unusable."""
    if not isinstance(root, str) or not root.startswith("/") or "\x00" in root or "\\" in root:
        return None
    normal = posixpath.normpath(root)
    if normal.startswith("//"):  # POSIX leaves a leading `//` alone; it names the same place as `/`
        normal = "/" + normal.lstrip("/")
    return None if normal == "/" else normal


def _home_rest(normal: str) -> tuple[str, ...] | None:
    """The parts of a path below the home directory that holds it, or None outside every home."""
    parts = tuple(p for p in normal.split("/") if p)
    if parts[:1] == ("root",):
        return parts[1:]
    for parent in _HOME_PARENTS:
        depth = parent.count("/")
        if "/" + "/".join(parts[:depth]) == parent and len(parts) > depth:
            return parts[depth + 1:]
    return None


def root_problem(root: str) -> str | None:
    """Why `root` cannot be a project root, or None where it can: it must be absolute, and neither `/`, a
    top-level folder, a system directory or anything under one, a home directory itself, nor a dot-directory
    under a home (`~/.ssh`, `~/.config`) or anything under one. Read as written (`.`/`..` resolved); a caller that
    has the directory resolves its links first."""
    normal = normal_root(root)
    if normal is None:
        if isinstance(root, str) and root.startswith("/") and posixpath.normpath(root).strip("/") == "":
            return "`/` is the whole machine, not a project"
        return f"{root!r} is not an absolute path"
    homes = [h for h in _HOME_PARENTS if normal == h or normal.startswith(h + "/")]  # /var/home/NAME is a home
    for system in _SYSTEM:
        if (normal == system or normal.startswith(system + "/")) and not any(h.startswith(system) for h in homes):
            where = "a system directory," if normal == system else f"under the system directory {system},"
            return f"{normal} is {where} never a project"
    if normal.count("/") == 1:
        return f"{normal} is a top-level folder, not a project"
    rest = _home_rest(normal)
    if rest is not None:
        if not rest:
            return f"{normal} is a home directory itself, not a project"
        if rest[0].startswith("."):
            return f"{normal} is under the dot-directory ~/{rest[0]} (the user's own configuration), not a project"
    return None
