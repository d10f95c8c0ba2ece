"""The modules the scripts import: what `uv run scripts/x.py` runs besides the script.

A script's `import mylib` runs `src/mylib/` (installed editable into the project's environment) as surely
as the script itself, so a write there changes what an allowed command does. Where the project is on
this machine, the scripts are read (as text, never run: proxy/policy/paths/import_text.py) for the names they
import, and each name found as a module or package in the project's import directories (the root, `src/`,
the `.pth` directories: proxy/policy/paths/environment.py) is read the same way, up to `_MAX_FILES` files.
The names are protected as a whole in those directories (proxy/policy/paths/modules.py), whether a module of
that name exists there or not: a new `src/yaml.py` is imported where `yaml` is not installed. What a script
loads by a name computed at run time is not seen: a documented limit.
"""

from __future__ import annotations

import os
import time

from .import_text import imported_names

__all__ = ["script_imports"]

_KEPT_SECONDS = 30.0
_MAX_FILES = 200
_MAX_BYTES = 1 << 19
_kept: dict[tuple[str, str, tuple[str, ...]], tuple[float, frozenset[str]]] = {}


def _names(path: str) -> set[str]:
    try:
        if os.path.getsize(path) > _MAX_BYTES:
            return set()
        with open(path, "rb") as handle:
            return imported_names(handle.read())
    except OSError:
        return set()


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


def _find(root: str, scripts_dir: str, import_dirs: tuple[str, ...]) -> frozenset[str]:
    scripts = os.path.join(root, scripts_dir)
    if not os.path.isdir(scripts):
        return frozenset()
    dirs = [os.path.join(root, d) if d else root for d in import_dirs]
    pending = _python_files(scripts, _MAX_FILES)
    budget = _MAX_FILES - len(pending)
    found: set[str] = set()
    while pending:
        names = set().union(*(_names(path) for path in pending)) - found
        found |= names
        pending = []
        for name in sorted(names):
            for place in (os.path.join(d, name) for d in dirs):
                for candidate in (place, place + ".py"):
                    if os.path.exists(candidate) and budget > 0:
                        more = _python_files(candidate, budget)
                        budget -= len(more)
                        pending += more
    return frozenset(found)


def script_imports(root: str, scripts_dir: str, import_dirs: tuple[str, ...]) -> frozenset[str]:
    """The top-level names the scripts under `root` import, directly or through the project's own modules
    they import; kept `_KEPT_SECONDS` per project."""
    key = (root, scripts_dir, import_dirs)
    now = time.monotonic()
    kept = _kept.get(key)
    if kept is not None and now - kept[0] < _KEPT_SECONDS:
        return kept[1]
    found = _find(root, scripts_dir, import_dirs)
    if len(_kept) >= 64:
        _kept.clear()
    _kept[key] = (now, found)
    return found
