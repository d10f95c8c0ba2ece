"""Writes that change what an import resolves to: a module, package, namespace directory, `.pth`, `.pyc`,
extension module or distribution metadata in a directory on the project interpreter's `sys.path`.

The directories are the project's import directories (proxy/policy/paths/environment.py: the root, `src/`,
the scripts dir, each `.pth` directory inside the project). In one of them a write is judged by the top-level
name it creates, replaces, renames or deletes (`src/chardet.py`, `src/chardet/x.py`,
`src/__pycache__/chardet.cpython-312.pyc`, `src/brotli.abi3.so`: `chardet`, `brotli`):
- a name the scripts import (proxy/policy/paths/imported.py) is protected as a whole, as the script is;
- a name something else could import - the standard library's, or one the installed distributions import
  anywhere (proxy/policy/paths/importable.py) - is protected at the top level: its module, its package's
  files, a new directory of that name (a namespace package is imported too). Inside a package that exists,
  only the distributions' names count: the project's own `test/` is no standard library;
- where the environment was not read (no `.venv` on this machine, or its names not computed yet), a new
  top-level module or package holding Python is refused: what would import it cannot be known. Where the
  project is not on this machine at all, new and existing cannot be told apart: every top-level module and
  package initializer is refused. `protected.new_modules.allow` names the modules the agent may make;
- `*.dist-info`/`*.egg-info` directories (entry points are read from every `sys.path` directory) always.
A file that is not Python (`src/data.json`, `docs/x.md` in an existing directory) changes no import.
Names are compared casefolded, as paths are.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .environment import environment_of
from .import_text import stdlib_names
from .importable import ImportableNames, importable_names, warm
from .imported import script_imports

__all__ = ["ImportView", "import_view", "shadowing_write", "unknown_view", "warm_root"]

_LOADABLE = (".py", ".pyw", ".pyc", ".pyo", ".so", ".pyd", ".pth")
_METADATA = (".dist-info", ".egg-info", ".egg-link")
# An NTFS 8.3 short name (`CHARDE~1.PY`): it could be any module's.
_SHORT_NAME = re.compile(r"~[0-9]")
_KEPT_SECONDS = 1.0
_KEPT_ROOTS = 64


@dataclass(frozen=True, slots=True)
class ImportView:
    """What a write is judged against for one project root; every name and directory folded."""

    dirs: tuple[str, ...]  # the import directories, relative to the root ("" the root)
    scripts: frozenset[str]  # the names the scripts import
    imported: frozenset[str] | None  # the names the installed distributions import; None: not read
    stdlib: frozenset[str]
    modules: Mapping[str, frozenset[str]] | None  # per directory: the names of its modules and packages
    packages: Mapping[str, frozenset[str]] | None  # per directory: its packages (directories); None: not here
    cold: bool = False  # an environment being read: new and existing are not told apart meanwhile


_folded: dict[int, tuple[ImportableNames, frozenset[str], frozenset[str]]] = {}


def _fold_names(found: ImportableNames) -> tuple[frozenset[str], frozenset[str]]:
    kept = _folded.get(id(found))
    if kept is None or kept[0] is not found:
        stdlib = frozenset(n.casefold() for n in found.stdlib)
        kept = (found, frozenset(n.casefold() for n in found.names) - stdlib, stdlib)
        if len(_folded) >= _KEPT_ROOTS:
            _folded.clear()
        _folded[id(found)] = kept
    return kept[1], kept[2]


_STDLIB = frozenset(n.casefold() for n in stdlib_names())


def unknown_view(scripts_dir: str, fold: Callable[[str], str]) -> ImportView:
    """The view of a project that is not on this machine: its layout assumed, nothing else known."""
    dirs = tuple(dict.fromkeys(fold(d) for d in ("", "src", scripts_dir)))
    return ImportView(dirs=dirs, scripts=frozenset(), imported=None, stdlib=_STDLIB, modules=None, packages=None)


def _listing(root: str, relative: str) -> tuple[frozenset[str], frozenset[str]]:
    """The folded module names of a directory's top-level entries, and those of its directories."""
    modules: set[str] = set()
    packages: set[str] = set()
    try:
        with os.scandir(os.path.join(root, relative) if relative else root) as entries:
            for entry in entries:
                name = entry.name.casefold()
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if is_dir:
                    packages.add(name)
                    modules.add(name)
                elif name.endswith(_LOADABLE):
                    modules.add(name.split(".", 1)[0])
    except OSError:
        pass
    return frozenset(modules), frozenset(packages)


_kept: dict[tuple[str, str], tuple[float, ImportView]] = {}


def import_view(root: str, scripts_dir: str, fold: Callable[[str], str]) -> ImportView:
    """The view of the project at `root` on this machine (kept `_KEPT_SECONDS`; not while its names are being
    computed)."""
    key = (root, scripts_dir)
    now = time.monotonic()
    kept = _kept.get(key)
    if kept is not None and now - kept[0] < _KEPT_SECONDS:
        return kept[1]
    env = environment_of(root, scripts_dir)
    found = importable_names(env)
    imported, stdlib = _fold_names(found) if found is not None else (None, _STDLIB)
    raw_dirs: dict[str, str] = {}
    for raw in env.import_dirs:
        raw_dirs.setdefault(fold(raw), raw)
    dirs = tuple(raw_dirs)
    listings = {d: _listing(env.root, raw) for d, raw in raw_dirs.items()}
    scripts = frozenset(n.casefold() for n in script_imports(env.root, scripts_dir.strip("/"), env.import_dirs))
    view = ImportView(dirs=dirs, scripts=scripts, imported=imported, stdlib=stdlib | _STDLIB,
                      modules={d: m for d, (m, _) in listings.items()},
                      packages={d: p for d, (_, p) in listings.items()},
                      cold=env.readable and found is None)
    if not view.cold:
        if len(_kept) >= _KEPT_ROOTS:
            _kept.clear()
        _kept[key] = (now, view)
    return view


def warm_root(root: str, scripts_dir: str) -> None:
    """Start computing what the project's environment imports, where the project is on this machine."""
    if os.path.isdir(root):
        warm(environment_of(root, scripts_dir))


def shadowing_write(form: str, view: ImportView, allow: frozenset[str]) -> bool:
    """Whether writing `form` (folded, relative to the root) changes what an import resolves to."""
    for directory in view.dirs:
        if not directory:
            rest = form
        elif form.startswith(directory) and form[len(directory):len(directory) + 1] == "/":
            rest = form[len(directory) + 1:]
        else:
            continue
        if rest and _shadows(rest, directory, view, allow):
            return True
    return False


def _shadows(rest: str, directory: str, view: ImportView, allow: frozenset[str]) -> bool:
    first, slash, below = rest.partition("/")
    if first.endswith(_METADATA):
        return True
    loadable = rest.endswith(_LOADABLE)
    if first == "__pycache__":
        if not below:
            return False
        name, package = below.partition(".")[0], False
    elif not slash:
        if not loadable:
            return False  # a data file beside the modules
        name, package = first.partition(".")[0], False
    else:
        name, package = first, True
    if "~" in name and _SHORT_NAME.search(name):
        return loadable
    if not name.isidentifier():
        return False  # no import statement can name it
    if name in view.scripts and name not in view.stdlib:  # the standard library's come first on `sys.path`
        return True
    initializer = package and below.startswith(("__init__.", "__pycache__"))
    existing = view.packages is not None and name in view.packages.get(directory, ())
    if package and existing:  # inside a package that exists: the project's own, unless something imports it
        if view.imported is not None:
            return name in view.imported
        return view.cold and initializer
    if name in allow:
        return False
    if name in view.stdlib or (view.imported is not None and name in view.imported):
        return True
    if view.imported is not None:
        return False
    if view.modules is None or view.cold:  # new and existing not told apart: any top-level module runs on import
        return not package or initializer
    new = name not in view.modules.get(directory, ())
    return new and loadable
