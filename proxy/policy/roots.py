"""What a project root is: an absolute directory, compared after `.` and `..` are resolved, that names a project.

The terms every room shares: the policy file's `paths.project_root`, the `project_root_header`, a project key's
root and the roots a client states (proxy/sessions/project_root.py) all read a root this one way
(`normal_root`) and accept it only when `root_problem` finds nothing wrong with it.

A root lets every path below it through the path rules, so it must name a project, never a place the system or
the user's tools own: `/` itself, a top-level folder (`/tmp`, `/home`, `/srv`), a home directory itself (`/root`,
`/home/NAME`, `/Users/NAME`), anything in the system's own trees (`SYSTEM_DIRS`: configuration, programs,
libraries, boot files, devices, kernel and runtime state, spool and cron), and any dot-directory (a tool's
configuration or state: `~/.ssh`, `~/.config`, a project's `.git` or `.venv`) or `site-packages` anywhere on
the way. `/opt/APP`, `/srv/APP`, `/workspace/APP`, `/tmp/x/APP`, `/home/NAME/APP` are projects.
"""

from __future__ import annotations

import os
import posixpath

__all__ = ["HOME_PARENTS", "SYSTEM_DIRS", "normal_root", "root_problem"]

# The system's own trees. `/opt` is not one: nothing the system runs at boot, login or on a schedule reads it,
# and containers keep their application there (`/opt/app`); `/opt` itself is refused as a top-level folder.
# `/private/etc` and `/private/var` are macOS's real `/etc` and `/var`; `/System` and `/Library` its own.
SYSTEM_DIRS: tuple[str, ...] = (
    "/etc", "/usr", "/var", "/boot", "/proc", "/sys", "/dev", "/run", "/bin", "/sbin", "/lib", "/lib32",
    "/lib64", "/libx32", "/snap", "/nix", "/private/etc", "/private/var", "/System", "/Library",
)
# Where home directories are: a home is `PARENT/NAME` (`/root` is one of its own).
HOME_PARENTS: tuple[str, ...] = ("/home", "/Users", "/var/home")
# Segments that are never a project of their own: an environment's installed packages.
_PACKAGE_DIRS = frozenset({"site-packages", "dist-packages"})


def normal_root(root: str) -> str | None:
    """A project root as it compares: absolute, `.`/`..` resolved, no trailing slash; None if unusable."""
    if not isinstance(root, str) or not root.startswith("/") or "\x00" in root or "\\" in root:
        return None
    normal = posixpath.normpath(root)
    if normal.startswith("//"):  # POSIX leaves a leading `//` alone; it names the same place as `/`
        normal = "/" + normal.lstrip("/")
    return None if normal == "/" else normal


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


def _home_of(folded: str) -> str | None:
    """The home directory a (casefolded) path is in or is, else None."""
    if _under(folded, "/root"):
        return "/root"
    for parent in HOME_PARENTS:
        parent = parent.casefold()
        if folded.startswith(parent + "/"):
            return "/".join(folded.split("/")[:parent.count("/") + 2])
    return None


def _problem(normal: str) -> str | None:
    folded = normal.casefold()  # macOS's and Windows' file systems ignore case: `/ETC` is `/etc` there
    parts = [p for p in normal.split("/") if p]
    home = _home_of(folded)
    if home == folded:
        return "a home directory itself, not a project"
    # A home's projects are projects, under `/var/home` too (Fedora Silverblue's real `/home`).
    if home is None and any(_under(folded, top.casefold()) for top in SYSTEM_DIRS):
        return "a system directory"
    if len(parts) < 2:
        return "a top-level folder, not a project"
    if any(p.startswith(".") for p in parts):
        return "a dot-directory (a tool's configuration or state), not a project"
    if any(p.casefold() in _PACKAGE_DIRS for p in parts):
        return "an environment's installed packages, not a project"
    return None


def root_problem(root: str) -> str | None:
    """Why `root` cannot be a project root (a short phrase), or None when it can. Every place a root is accepted
    asks this: a stated root, `paths.project_root`, the `project_root_header`, a project key's `--root`. Where
    the directory exists on this machine, the place it really is (its links followed) is judged too: a link to
    `/etc` is `/etc`."""
    normal = normal_root(root) if isinstance(root, str) else None
    if normal is None:
        return "not an absolute directory other than /"
    problem = _problem(normal)
    if problem is None:
        try:
            real = os.path.realpath(normal)
        except (OSError, ValueError):
            real = normal
        if real != normal and (real_normal := normal_root(real)) is not None:
            problem = _problem(real_normal)
        elif real != normal:
            problem = "a link to /"
    return problem
