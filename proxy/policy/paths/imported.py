"""The project's own modules that the scripts import: what `uv run scripts/x.py` runs besides the script.

A script's `import mylib` runs `src/mylib/` (installed editable into the project's environment) as surely
as the script itself, so a write there changes what an allowed command does. Where the project is on
this machine, the scripts are read (their import lines, never run) for the modules they import by name; a module found
where the interpreter would look for the project's own code - the project root, `src/`, and the
directories the environment's `.pth` files add - is protected from writing, a package as a whole. The
modules those import are followed the same way, up to `_MAX_FILES` files read. What a script loads by
computed name (`importlib.import_module(x)`, `sys.path` edits) is not seen: a documented limit.
"""

from __future__ import annotations

import glob
import os
import re
import sys
import time
from collections.abc import Callable

__all__ = ["imported_modules"]

_KEPT_SECONDS = 30.0
_MAX_FILES = 200
_MAX_BYTES = 1 << 19
_kept: dict[tuple[str, str], tuple[float, frozenset[str]]] = {}


_FROM = re.compile(r"^[ \t]*from[ \t]+([A-Za-z_][A-Za-z0-9_]*)[A-Za-z0-9_.]*[ \t]+import\b", re.MULTILINE)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^\n#;]+)", re.MULTILINE)


def _names(path: str) -> set[str]:
    """The top-level module names a file imports by name (absolute imports), read line by line: wider than
    the parser (an import written in a string counts too), and fast enough for the request path."""
    try:
        if os.path.getsize(path) > _MAX_BYTES:
            return set()
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return set()
    found = set(_FROM.findall(text))
    for listed in _IMPORT.findall(text):
        for part in listed.split(","):
            words = part.strip().strip("()").split()
            if words:
                found.add(words[0].split(".")[0])
    return {name for name in found if name.isidentifier()}


def _search_dirs(root: str) -> list[str]:
    """Where the interpreter of `uv run` finds the project's code: the root, `src/`, and the directories
    the project environment's `.pth` files add (an editable install), those inside the project only."""
    dirs = [root, os.path.join(root, "src")]
    for pth in glob.glob(os.path.join(root, ".venv", "lib", "python*", "site-packages", "*.pth")):
        try:
            with open(pth, encoding="utf-8", errors="replace") as handle:
                lines = handle.read(_MAX_BYTES).splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if line and not line.startswith(("#", "import ")):
                place = os.path.realpath(os.path.join(os.path.dirname(pth), line))
                if place.startswith(root + "/"):
                    dirs.append(place)
    return dirs


def _python_files(place: str, budget: int) -> list[str]:
    if os.path.isfile(place):
        return [place]
    out: list[str] = []
    for parent, subdirs, files in os.walk(place):
        subdirs[:] = [d for d in subdirs if d != "__pycache__"]
        out += [os.path.join(parent, f) for f in files if f.endswith(".py")]
        if len(out) >= budget:
            break
    return out[:budget]


def _find(root: str, scripts_dir: str, fold: Callable[[str], str]) -> frozenset[str]:
    scripts = os.path.join(root, scripts_dir)
    if not os.path.isdir(scripts):
        return frozenset()
    dirs = _search_dirs(root)
    pending = _python_files(scripts, _MAX_FILES)
    budget = _MAX_FILES - len(pending)
    seen_names: set[str] = set()
    found: set[str] = set()
    while pending:
        # The standard library comes before the project's directories on `sys.path`: never shadowed there.
        names = set().union(*(_names(path) for path in pending)) - seen_names - sys.stdlib_module_names
        seen_names |= names
        pending = []
        for name in sorted(names):
            for place in (os.path.join(d, name) for d in dirs):
                for candidate in (place, place + ".py"):
                    # Protected whether it exists or not: a new `src/yaml.py` is imported where `yaml` is
                    # not installed.
                    found.add(fold(os.path.relpath(candidate, root)))
                    if os.path.exists(candidate) and budget > 0:
                            more = _python_files(candidate, budget)
                            budget -= len(more)
                            pending += more
    return frozenset(found)


def imported_modules(root: str, scripts_dir: str, fold: Callable[[str], str]) -> frozenset[str]:
    """The paths (relative to `root`, as `fold` writes them) of the project's modules and packages the
    scripts import, directly or through each other; kept `_KEPT_SECONDS` per project."""
    real = os.path.realpath(root)
    key = (real, scripts_dir)
    now = time.monotonic()
    kept = _kept.get(key)
    if kept is not None and now - kept[0] < _KEPT_SECONDS:
        return kept[1]
    found = _find(real, scripts_dir, fold)
    if len(_kept) >= 64:
        _kept.clear()
    _kept[key] = (now, found)
    return found
