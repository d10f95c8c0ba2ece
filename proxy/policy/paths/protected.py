"""Protected paths (`protected:`): files no tool may write, and secrets no tool may read.

The class is every file something other than the model runs or loads on its own (uv, Python, git, the
shell, the editor, the agent client, the proxy itself): writing one changes what an allowed command does.
A pattern is gitignore-like: without a leading `/` it matches at any depth (`*.pth`, `.git/`), with one
only from a project root (`/scripts/`); a match covers everything beneath. Two forms name places outside any
project, matched against absolute paths whatever the root (or none): `//etc/` from the file system's root,
`~/.ssh/` under every home directory (`/root`, `/home/NAME`, `/Users/NAME`, `/var/home/NAME`), as Claude
Code's permission rules write them. Paths are compared after
normalisation (NFKC, case, backslashes, `.`/`..`, repeated slashes, trailing dots and spaces per segment),
absolute ones under a project root as relative ones, and through the symlinks a root on this machine has;
and under the names macOS and Windows would read them by (proxy/policy/paths/spellings.py: ignorable code
points, alternate data streams, 8.3 short names). A write is also judged by what it would change for the
project's imports (proxy/policy/paths/modules.py).
The proxy's own policy and config files are protected wherever they are (`register_own_files`).
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import unicodedata
from collections.abc import Iterable

from ..roots import HOME_PARENTS
from ..schema import Policy, compiled_for
from .client_files import client_files
from .globs import GlobSet, Patterns, compile_glob, pattern_tokens, selects
from .inside import path_value_problem
from .modules import import_view, shadowing_write, unknown_view
from .spellings import literal_names, other_spellings

__all__ = ["READ", "WRITE", "fold", "glob_problem", "is_absolute_pattern", "own_files", "protected_for",
           "protected_problem", "register_own_files"]

WRITE = "write"
READ = "read"

_KEPT_GLOBS = 1024
_OWN: set[str] = set()
_OWN_DIRS: set[str] = set()
# The files of a watched policies dir that are policies (proxy/policy/file/manager.py reads these suffixes).
_POLICY_SUFFIXES = (".yaml", ".yml")
# What Python imports by a module's name: a source, or an extension module.
_MODULE_SUFFIXES = (".py", ".so", ".pyd")
_WILDCARDS = re.compile(r"[*?\[{]")  # a filter, not a file: judged as one (glob_problem)


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


def _is_own_below(relative: str) -> bool:
    """Whether a folded relative path names one of the proxy's own files from some folder: an own file, or a policy
    file of a watched policies dir, ends with it."""
    if relative in ("", "..") or relative.startswith("../"):
        return False
    tail = "/" + relative
    if any(mine.endswith(tail) for mine in _OWN):
        return True
    # A policy file directly in a watched dir: `policies/new.yaml` from above it, `new.yaml` from inside it.
    parent, _, name = tail.rpartition("/")
    return any(mine.endswith(tail) or (name.endswith(_POLICY_SUFFIXES) and mine.endswith(parent))
               for mine in _OWN_DIRS)


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


def is_absolute_pattern(pattern: str) -> bool:
    """A pattern that names a place outside any project: `//x` (from the file system's root), `~/x` (in every
    home)."""
    text = pattern.strip()
    return text.startswith(("//", "~/"))


# Where a `~/` pattern starts: any home directory, as `fold` writes it.
_HOMES = "(?:/root|" + "|".join(re.escape(fold(parent)) + "/[^/]+" for parent in HOME_PARENTS) + ")"


@functools.lru_cache(maxsize=64)
def _compile(patterns: tuple[str, ...], *, floating: bool = False) -> re.Pattern[str] | None:
    """All relative patterns as one regex searched over a folded relative path: one search per path, not one
    per pattern and segment. `floating`: the patterns anchored at a project root match at any depth too (where
    no root is known, any folder on a relative path may be the root). Kept per pattern list: every load of a
    policy (each start, reload and sibling file) would otherwise fold and escape the same patterns again."""
    anchored: list[str] = []
    anywhere: list[str] = []
    for pattern in patterns:
        if is_absolute_pattern(pattern):
            continue
        folded = fold(pattern)
        segments = [s for s in folded.split("/") if s]
        if not segments:
            continue
        (anchored if folded.startswith("/") and not floating else anywhere).append("/".join(map(_segment, segments)))
    # The shared start and end written once: the engine tries the alternatives only where a segment starts.
    parts = [f"{start}(?:{'|'.join(bodies)})(?:/|$)" for start, bodies in (("^", anchored), ("(?:^|/)", anywhere))
             if bodies]
    return re.compile("|".join(parts)) if parts else None


@functools.lru_cache(maxsize=64)
def _compile_absolute(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """The `//x` and `~/x` patterns as one regex searched over a folded absolute path."""
    rooted: list[str] = []
    homed: list[str] = []
    for pattern in patterns:
        if not is_absolute_pattern(pattern):
            continue
        text = pattern.strip()
        segments = [s for s in fold(text[2:]).split("/") if s]
        if segments:
            (rooted if text.startswith("//") else homed).append("/".join(map(_segment, segments)))
    parts = [f"^{start}/(?:{'|'.join(bodies)})(?:/|$)" for start, bodies in (("", rooted), (_HOMES, homed))
             if bodies]
    return re.compile("|".join(parts)) if parts else None


class Protected:
    """One policy's protected lists, compiled once per policy load."""

    def __init__(self, policy: Policy) -> None:
        rules = policy.protected
        self.source = rules
        write = list(rules.write)
        if rules.client_files:  # what every client loads on its own (proxy/policy/paths/client_files.py)
            write += client_files(policy)
        if rules.scripts_dir:
            write.append("/" + policy.bash.scripts_dir.strip("/") + "/")
        self.scripts_dir = policy.bash.scripts_dir.strip("/") if rules.scripts_dir else None
        self.import_scripts_dir = policy.bash.scripts_dir.strip("/")
        self.new_modules = frozenset(name.casefold() for name in rules.new_modules.allow)
        self.unknown_view = unknown_view(self.import_scripts_dir, fold)
        self.short_names = literal_names([*map(fold, write), *map(fold, rules.read), fold(self.import_scripts_dir)])
        self.write = _compile((*write, *rules.read))  # a writing tool reads the file too
        self.read = _compile(tuple(rules.read))
        self.write_absolute = _compile_absolute((*write, *rules.read))
        self.read_absolute = _compile_absolute(tuple(rules.read))
        self.write_unrooted = _compile((*write, *rules.read), floating=True)
        self.read_unrooted = _compile(tuple(rules.read), floating=True)
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
                self._read_patterns = pattern_tokens((fold(p), p.rstrip().endswith("/")) for p in self.source.read
                                                     if not is_absolute_pattern(p))
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

    def _other_spellings(self, forms: list[str]) -> list[str]:
        """The forms and the names a macOS or Windows reader would take each for (proxy/policy/paths/
        spellings.py): a short name may stand for any protected name, or one of the proxy's own files."""
        names = self.short_names | {name: name for mine in _OWN | _OWN_DIRS if (name := mine.rpartition("/")[2])}
        return forms + [other for form in forms for other in other_spellings(form, names, fold)]

    def _shadowing(self, relative: list[str], roots: tuple[str, ...]) -> bool:
        """Whether a write (its forms relative to a root) changes what an import of the project's interpreter
        resolves to (proxy/policy/paths/modules.py); a root not on this machine is judged by its layout."""
        for root in roots or (None,):
            view = import_view(root, self.import_scripts_dir, fold) if root and os.path.isdir(root) \
                else self.unknown_view
            for form in relative:
                if shadowing_write(form, view, self.new_modules):
                    return True
        return False

    def problem(self, path: str, *, write: bool, roots: tuple[str, ...] = (), imports: bool = False) -> bool:
        """Whether `path` is protected for this access (a write checks both lists: a writing tool reads);
        `imports`: the access writes the file itself, so a module it would shadow counts too."""
        if not roots and not fold(path).startswith("/"):
            return self._unrooted(path, write=write, imports=imports)
        patterns = self.write if write else self.read
        outside = self.write_absolute if write else self.read_absolute
        own = write and self.source.own_files and bool(_OWN or _OWN_DIRS)
        if patterns is None and outside is None and not own:
            return False
        relative, absolute, escapes = self._candidates(path, roots)
        if not (path.isascii() and ":" not in path and "~" not in path):
            relative, absolute = self._other_spellings(relative), self._other_spellings(absolute)
        if escapes or (patterns is not None and any(patterns.search(form) for form in relative)):
            return True
        if outside is not None and any(outside.search(form) for form in absolute):
            return True
        if write and imports and self._shadowing(relative, roots):
            return True
        if own:
            return any(_is_own(a) for a in absolute)
        return False


    def _unrooted(self, path: str, *, write: bool, imports: bool = False) -> bool:
        """A relative path where no project root is known: where the agent works is unknown, so the path may land
        below any folder. Protected when a pattern matches it from any of its folders (`/scripts/` at any depth),
        when it may be one of the proxy's own files from any folder (`policies/strict.yaml` from the directory
        the proxy serves it from, or any above it), and, for a write, when it is a Python module a script may
        import (which modules those are is read from the project, and there is none to read)."""
        forms = [fold(path)]
        if not (path.isascii() and ":" not in path and "~" not in path):
            forms = self._other_spellings(forms)  # as macOS or Windows would name it
        patterns = self.write_unrooted if write else self.read_unrooted
        if patterns is not None and any(patterns.search(form) for form in forms):
            return True
        if not write:
            return False
        if self.scripts_dir is not None and any(form.endswith(_MODULE_SUFFIXES) and not _WILDCARDS.search(form)
                                                for form in forms):
            return True
        if imports and self._shadowing(forms, ()):  # a new top-level module or package of an unseen project
            return True
        return self.source.own_files and any(_is_own_below(form) for form in forms)


def protected_for(policy: Policy) -> Protected:
    return compiled_for(policy, "_protected", policy.protected, Protected)


def protected_problem(policy: Policy, path: str, roots: tuple[str, ...] = (), *, write: bool = True,
                      imports: bool = False) -> str | None:
    """`protected_path` when a tool may not touch `path` this way, else None: the one check every judged
    write (and secret read) goes through. `imports`: a file-writing tool's own path (written, replaced,
    renamed or deleted), judged also by what it would change for the project's imports."""
    found = protected_for(policy).problem(path, write=write, roots=roots, imports=imports and write)
    return "protected_path" if found else None


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
