"""Secrets a directory search would read, as the files on this machine show them.

A grep over `.` opens every file below it that its filter selects, `server.key` and `.env` included,
whatever the call names. Where the searched directory is under a project root that exists on this
machine (the proxy beside the agent), the protected reads below it are listed and the search is refused
when its filter selects one; an ordinary `grep pattern .` in a project without secrets, or a search of
`src/`, passes. Where the directory cannot be seen (no root known, the agent on another machine), the
search is judged by its names only (a documented limit, docs/policy.md).

A search from above skips what no search of the project's own files needs and no tool can place a secret into:
`.git/` (the agents' search tools leave it out; a direct read of its `config`, which may hold a remote
URL's token, is a protected read), virtual environments (a `pyvenv.cfg` beside them; protected from
writing) and `node_modules/`. A search that targets one of them or enters it (`grep x node_modules/`,
`.git/modules/`, a filter that names it) is judged like any other directory: they are listed then.
A link counts by its name and by where it leads (some search tools follow links): a
linked directory inside the project is listed, one leading out of it counts as protected. A listing is
kept `_KEPT_SECONDS`; one with more than `_MAX_ENTRIES` entries is not finished and the search is
refused (search a narrower directory).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from .globs import compile_glob, matches
from .protected import Protected, fold

__all__ = ["searched_secret"]

_KEPT_SECONDS = 5.0
_KEPT_DIRECTORIES = 64
_MAX_ENTRIES = 20_000
_SKIPPED = frozenset({".git", "node_modules"})


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _listing(protected: Protected, directory: str, root: str, entered: frozenset[str] = frozenset()) -> \
        tuple[str, ...] | None:
    """The protected reads below `directory` (paths relative to it), or None when there are too many
    entries to list. A file is protected by its own path and by the path a link leads to; a linked
    directory inside the project is listed where it leads (a search tool may follow it), one leading out
    of the project counts as protected (as a path through it would)."""
    if protected.read is None:
        return ()
    search = protected.read.search
    found: list[str] = []
    # (the directory on disk, its path relative to the root, its path below the searched directory)
    pending = [(directory, os.path.relpath(directory, root), "")]
    seen = {directory}
    count = 0
    while pending:
        place, from_root, below = pending.pop()
        try:
            entries = list(os.scandir(place))
        except OSError:
            continue
        count += len(entries)
        if count > _MAX_ENTRIES:
            return None
        for entry in entries:
            relative = below + entry.name
            if search(fold(entry.name if from_root == "." else f"{from_root}/{entry.name}")):
                found.append(relative)
                continue
            try:
                if entry.is_symlink():
                    real = os.path.realpath(entry.path)
                    if not _inside(real, root):
                        if os.path.isdir(real) or search(fold(real)):
                            found.append(relative)  # out of the project: a secret there is out of sight
                        continue
                    target = os.path.relpath(real, root)
                    if search(fold(target)):
                        found.append(relative)
                    elif os.path.isdir(real) and real not in seen and not _skipped(real, entered):
                        seen.add(real)
                        pending.append((real, target, relative + "/"))
                elif entry.is_dir() and not _skipped(entry.path, entered):
                    seen.add(entry.path)
                    pending.append((entry.path, fold(os.path.relpath(entry.path, root)), relative + "/"))
            except OSError:
                continue
    return tuple(found)


def _skipped(directory: str, entered: frozenset[str] = frozenset()) -> bool:
    """A directory a search from above leaves out, unless the search entered its kind (`entered`: `.git`,
    `node_modules`, `venv` for a virtual environment)."""
    name = os.path.basename(directory)
    if name in _SKIPPED:
        return name not in entered
    return "venv" not in entered and os.path.exists(os.path.join(directory, "pyvenv.cfg"))


def _entered(place: str, root: str, filters: Iterable[str]) -> frozenset[str]:
    """The skipped kinds this search enters: the searched directory is one or lies inside one, or a filter
    names one."""
    relative = os.path.relpath(place, root)
    parts = set(fold(relative).split("/"))
    entered = {name for name in _SKIPPED if name in parts or any(name in fold(text) for text in filters)}
    current = place
    while _inside(current, root) and current != root:
        if os.path.exists(os.path.join(current, "pyvenv.cfg")):
            entered.add("venv")
            break
        current = os.path.dirname(current)
    return frozenset(entered)


def _kept_listing(protected: Protected, directory: str, root: str, entered: frozenset[str]) -> \
        tuple[str, ...] | None:
    now = time.monotonic()
    key = directory if not entered else f"{directory}\0{','.join(sorted(entered))}"
    kept = protected.inventories.get(key)
    if kept is not None and now - kept[0] < _KEPT_SECONDS:
        return kept[1]
    listing = _listing(protected, directory, root, entered)
    if len(protected.inventories) >= _KEPT_DIRECTORIES:
        protected.inventories.clear()
    protected.inventories[key] = (now, listing)
    return listing


def searched_secret(protected: Protected, directory: str, filters: Iterable[str], roots: tuple[str, ...]) -> bool:
    """Whether a search of `directory` (a path the path rules accepted) with these filter globs (none: every
    file) would read a protected file that exists on this machine; the answer is kept as its listing is."""
    key = (directory, tuple(filters), roots)
    now = time.monotonic()
    kept = protected.searches.get(key)
    if kept is not None and now - kept[0] < _KEPT_SECONDS:
        return kept[1]
    found = _searched_secret(protected, directory, key[1], roots)
    if len(protected.searches) >= _KEPT_DIRECTORIES * 16:
        protected.searches.clear()
    protected.searches[key] = (now, found)
    return found


def _searched_secret(protected: Protected, directory: str, filters: Iterable[str], roots: tuple[str, ...]) -> bool:
    filters = tuple(filters)
    globs = [compile_glob(text) for text in filters]
    for root in roots:
        if not os.path.isdir(root):
            continue
        real_root = os.path.realpath(root)
        place = os.path.realpath(directory if directory.startswith("/") else os.path.join(root, directory))
        if not _inside(place, real_root) or not os.path.isdir(place):
            continue  # a file is judged by the read rules; a missing directory holds nothing to read
        listing = _kept_listing(protected, place, real_root, _entered(place, real_root, filters))
        if listing is None:
            return True
        for path in listing:
            if not globs or any(matches(glob, fold(path)) for glob in globs):
                return True
    return False
