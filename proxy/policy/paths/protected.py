"""Protected paths (`protected:`): files no tool may write, and secrets no tool may read.

The class is every file something other than the model runs or loads on its own (uv, Python, git, the
shell, the editor, the agent client, the proxy itself): writing one changes what an allowed command does.
A pattern is gitignore-like: without a leading `/` it matches at any depth (`*.pth`, `.git/`), with one
only from a project root (`/scripts/`); a match covers everything beneath. Paths are compared after
normalisation (NFKC, case, backslashes, `.`/`..`, repeated slashes, trailing dots and spaces per segment),
absolute ones under a project root as relative ones, and through the symlinks a root on this machine has.
The proxy's own policy and config files are protected wherever they are (`register_own_files`).
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import unicodedata
from collections.abc import Iterable

from ..schema import Policy, compiled_for
from .globs import GlobSet, Patterns, compile_glob, pattern_tokens, selects
from .imported import imported_modules
from .inside import path_value_problem

__all__ = ["READ", "WRITE", "fold", "glob_problem", "own_files", "protected_for", "protected_problem",
           "register_own_files"]

WRITE = "write"
READ = "read"

_KEPT_GLOBS = 1024
_OWN: set[str] = set()
_OWN_DIRS: set[str] = set()
# The files of a watched policies dir that are policies (proxy/policy/file/manager.py reads these suffixes).
_POLICY_SUFFIXES = (".yaml", ".yml")


def _forms(path: str) -> set[str]:
    absolute = os.path.abspath(path)
    return {fold(absolute), fold(os.path.realpath(absolute))}


def register_own_files(paths: Iterable[str], *, policy_dirs: Iterable[str] = ()) -> None:
    """Add the proxy's own files (loaded policy files, the config file) and watched policies dirs (the dir
    itself and every policy file directly in it, not the rest of it): protected from writing wherever
    they are."""
    for path in paths:
        if path:
            _OWN.update(_forms(path))
    for path in policy_dirs:
        if path:
            _OWN_DIRS.update(_forms(path))


def own_files() -> frozenset[str]:
    return frozenset(_OWN | _OWN_DIRS)


def _is_own(path: str) -> bool:
    if any(path == mine or path.startswith(mine + "/") for mine in _OWN):
        return True
    parent, _, name = path.rpartition("/")
    return path in _OWN_DIRS or (parent in _OWN_DIRS and name.endswith(_POLICY_SUFFIXES))


def fold(text: str) -> str:
    """The form every compared path takes: NFKC, casefolded, `/` separators, segments without trailing
    dots and spaces (Windows drops them), `.` and repeated slashes gone."""
    text = unicodedata.normalize("NFKC", text).replace("\\", "/").casefold()
    lead = "/" if text.startswith("/") else ""
    parts: list[str] = []
    for part in text.split("/"):
        part = part.rstrip(". \t") if part not in (".", "..") else part
        if part in ("", "."):
            continue
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not lead:
                parts.append("..")
            continue
        parts.append(part)
    return lead + "/".join(parts)


def _segment(text: str) -> str:
    """One pattern segment as a regex: `*` and `?` stay within the segment."""
    return "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in text)


@functools.lru_cache(maxsize=64)
def _compile(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """All patterns as one regex searched over a folded relative path: one search per path, not one per
    pattern and segment. Kept per pattern list: every load of a policy (each start, reload and sibling file)
    would otherwise fold and escape the same few hundred patterns again."""
    anchored: list[str] = []
    anywhere: list[str] = []
    for pattern in patterns:
        folded = fold(pattern)
        segments = [s for s in folded.split("/") if s]
        if not segments:
            continue
        (anchored if folded.startswith("/") else anywhere).append("/".join(map(_segment, segments)))
    # The shared start and end written once: the engine tries the alternatives only where a segment starts.
    parts = [f"{start}(?:{'|'.join(bodies)})(?:/|$)" for start, bodies in (("^", anchored), ("(?:^|/)", anywhere))
             if bodies]
    return re.compile("|".join(parts)) if parts else None


class Protected:
    """One policy's protected lists, compiled once per policy load."""

    def __init__(self, policy: Policy) -> None:
        rules = policy.protected
        self.source = rules
        write = list(rules.write)
        if rules.scripts_dir:
            write.append("/" + policy.bash.scripts_dir.strip("/") + "/")
        self.scripts_dir = policy.bash.scripts_dir.strip("/") if rules.scripts_dir else None
        self.write = _compile((*write, *rules.read))  # a writing tool reads the file too
        self.read = _compile(tuple(rules.read))
        self._read_patterns: Patterns | None = None
        self._globs: dict[str, bool] = {}
        self.glob_problems: dict[tuple[str, tuple[str, ...]], str | None] = {}
        # Per searched directory: when it was walked, and the protected reads found (proxy/policy/paths/on_disk.py).
        self.inventories: dict[str, tuple[float, tuple[str, ...] | None]] = {}
        self.searches: dict[tuple[str, tuple[str, ...], tuple[str, ...]], tuple[float, bool]] = {}

    def glob_selects(self, glob: GlobSet, key: str) -> bool:
        """Whether a filter glob could select a protected read (kept per glob: agents repeat their filters)."""
        found = self._globs.get(key)
        if found is None:
            if self._read_patterns is None:
                self._read_patterns = pattern_tokens((fold(p), p.rstrip().endswith("/")) for p in self.source.read)
            found = not glob.complete or selects(glob, self._read_patterns)
            if len(self._globs) >= _KEPT_GLOBS:
                self._globs.clear()
            self._globs[key] = found
        return found

    def _candidates(self, path: str, roots: tuple[str, ...]) -> tuple[list[str], list[str], bool]:
        """(forms relative to a root, absolute forms) under which `path` is compared, and whether a symlink
        under a root leads it out of that root."""
        folded = fold(path)
        relative: list[str] = []
        absolute: list[str] = []
        if folded.startswith("/"):
            absolute.append(folded)
            for root in roots:
                froot = fold(root)
                if folded == froot or folded.startswith(froot + "/"):
                    relative.append(folded[len(froot) + 1:])
            if not relative:
                relative.append(folded[1:])
        else:
            relative.append(folded)
            absolute += [fold(posixpath.join(root, folded)) for root in roots]
        # Symlinks a root on this machine has: the file the tool would really touch.
        raw = unicodedata.normalize("NFKC", path).replace("\\", "/")
        escapes = False
        for root in roots:
            inside = not raw.startswith("/") or fold(raw).startswith(fold(root) + "/")
            if not inside or not os.path.isdir(root):
                continue
            try:
                real = os.path.realpath(raw if raw.startswith("/") else os.path.join(root, raw))
                real_root = os.path.realpath(root)
            except (OSError, ValueError):
                continue
            freal, froot = fold(real), fold(real_root)
            absolute.append(freal)
            if freal.startswith(froot + "/"):
                relative.append(freal[len(froot) + 1:])
            elif freal != froot and ".." not in fold(raw).split("/"):
                escapes = True  # `link/x` with `link -> /etc`: the write lands outside the project
        return relative, absolute, escapes

    def _imported(self, relative: list[str], roots: tuple[str, ...]) -> bool:
        """Whether a path (its forms relative to a root) is one of the project's modules the scripts import
        (proxy/policy/paths/imported.py)."""
        assert self.scripts_dir is not None
        for root in roots:
            if os.path.isdir(root):
                modules = imported_modules(root, self.scripts_dir, fold)
                if any(form == m or form.startswith(m + "/") for form in relative for m in modules):
                    return True
        return False

    def problem(self, path: str, *, write: bool, roots: tuple[str, ...] = ()) -> bool:
        """Whether `path` is protected for this access (a write checks both lists: a writing tool reads)."""
        patterns = self.write if write else self.read
        own = write and self.source.own_files and bool(_OWN or _OWN_DIRS)
        if patterns is None and not own:
            return False
        relative, absolute, escapes = self._candidates(path, roots)
        if escapes or (patterns is not None and any(patterns.search(form) for form in relative)):
            return True
        if write and self.scripts_dir is not None and self._imported(relative, roots):
            return True
        if own:
            return any(_is_own(a) for a in absolute)
        return False


def protected_for(policy: Policy) -> Protected:
    return compiled_for(policy, "_protected", policy.protected, Protected)


def protected_problem(policy: Policy, path: str, roots: tuple[str, ...] = (), *, write: bool = True) -> str | None:
    """`protected_path` when a tool may not touch `path` this way, else None: the one check every judged
    write (and secret read) goes through."""
    return "protected_path" if protected_for(policy).problem(path, write=write, roots=roots) else None


def glob_problem(policy: Policy, glob: str, roots: tuple[str, ...] = ()) -> str | None:
    """`absolute_path`, `path_escape` or `protected_path` for a filter glob of a read or search tool: each of
    its alternatives read as a path (wildcards as plain names: `../*` climbs out), and what it could
    select judged against `protected.read` (proxy/policy/paths/globs.py)."""
    protected = protected_for(policy)
    key = (glob, roots)
    if key in protected.glob_problems:  # agents repeat their filters
        return protected.glob_problems[key]
    compiled = compile_glob(glob)
    problem = next(filter(None, (path_value_problem(spelling, roots) for spelling in compiled.spellings)), None)
    if problem is None and protected.glob_selects(compiled, glob):
        problem = "protected_path"
    if len(protected.glob_problems) >= _KEPT_GLOBS:
        protected.glob_problems.clear()
    protected.glob_problems[key] = problem
    return problem
