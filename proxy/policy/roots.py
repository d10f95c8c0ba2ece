"""What a project root is: an absolute directory, compared after `.` and `..` are resolved.

The terms every room shares: the policy file's `paths.project_root`, the tool profiles and the roots a client
states (proxy/sessions/project_root.py) all read a root this one way.
"""

from __future__ import annotations

import posixpath

__all__ = ["normal_root"]

def normal_root(root: str) -> str | None:
    """A project root as it compares: absolute, `.`/`..` resolved, no trailing slash; None if unusable."""
    if not isinstance(root, str) or not root.startswith("/") or "\x00" in root or "\\" in root:
        return None
    normal = posixpath.normpath(root)
    if normal.startswith("//"):  # POSIX leaves a leading `//` alone; it names the same place as `/`
        normal = "/" + normal.lstrip("/")
    return None if normal == "/" else normal

