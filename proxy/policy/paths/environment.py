"""The interpreter `uv run` uses for a project, and the directories on its `sys.path` that the agent can write.

`uv run scripts/x.py` runs the project's environment, `.venv` (made by uv from `.python-version` and
`requires-python` when missing): its `pyvenv.cfg` names the base interpreter (`home`, `version_info`), its
`lib/pythonX.Y/site-packages` holds the installed distributions, and every `.pth` file there adds directories to
`sys.path` (an editable install adds `src/` or the root). Where the agent can write, those directories decide
what an import resolves to: the project root, `src/`, the scripts dir (`sys.path[0]` of a script) and each
`.pth` directory inside the project. Read from the files, never by running the interpreter; kept per root and
looked at again at most every `_KEPT_SECONDS`.
"""

from __future__ import annotations

import glob
import os
import re
import time
import tomllib
from dataclasses import dataclass

__all__ = ["Environment", "environment_of"]

_KEPT_SECONDS = 2.0
_KEPT_ROOTS = 64
_MAX_PTH_BYTES = 1 << 19
_VERSION = re.compile(r"(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class Environment:
    """What `uv run` would run for the project at `root` (a real path)."""

    root: str
    venv: str | None  # the environment's directory, where one with a readable site-packages exists
    version: str | None  # X.Y of its interpreter; else what uv would pick (`.python-version`, `requires-python`)
    site_dirs: tuple[str, ...]  # its site-packages
    stdlib_dirs: tuple[str, ...]  # the base interpreter's standard library, where `pyvenv.cfg` leads to one
    import_dirs: tuple[str, ...]  # relative to root, "" the root itself: where the agent's files are importable
    fingerprint: tuple[object, ...]  # what changes when the environment does (its installs, `.pth` files, uv.lock)

    @property
    def readable(self) -> bool:
        return bool(self.site_dirs)


def _stat(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size


def _config(venv: str) -> dict[str, str]:
    values: dict[str, str] = {}
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8", errors="replace") as handle:
            for line in handle.read(1 << 16).splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    values[key.strip().lower()] = value.strip()
    except OSError:
        pass
    return values


def _planned_version(root: str) -> str | None:
    """The interpreter uv would make the environment with: `.python-version`, else `requires-python`."""
    try:
        with open(os.path.join(root, ".python-version"), encoding="utf-8", errors="replace") as handle:
            for line in handle.read(4096).splitlines():
                found = _VERSION.search(line)
                if found and not line.lstrip().startswith("#"):
                    return f"{found.group(1)}.{found.group(2)}"
    except OSError:
        pass
    try:
        with open(os.path.join(root, "pyproject.toml"), "rb") as handle:
            project = tomllib.load(handle).get("project", {})
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    wanted = project.get("requires-python") if isinstance(project, dict) else None
    return wanted if isinstance(wanted, str) else None


def _pth_dirs(site: str, root: str) -> tuple[list[str], list[tuple[str, object]]]:
    """The directories inside `root` that the `.pth` files of `site` add, and each file's stamp."""
    dirs: list[str] = []
    stamps: list[tuple[str, object]] = []
    for pth in sorted(glob.glob(os.path.join(glob.escape(site), "*.pth"))):
        stamps.append((pth, _stat(pth)))
        try:
            with open(pth, encoding="utf-8", errors="replace") as handle:
                lines = handle.read(_MAX_PTH_BYTES).splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if not line or line.startswith(("#", "import ", "import\t")):
                continue
            place = os.path.realpath(os.path.join(site, line))
            if place == root:
                dirs.append("")
            elif place.startswith(root + os.sep):
                dirs.append(os.path.relpath(place, root).replace(os.sep, "/"))
    return dirs, stamps


def _read(root: str, scripts_dir: str) -> Environment:
    venv = os.path.join(root, ".venv")
    config = _config(venv)
    site_dirs = tuple(sorted(p for p in glob.glob(os.path.join(glob.escape(venv), "lib", "python*", "site-packages"))
                             + glob.glob(os.path.join(glob.escape(venv), "Lib", "site-packages")) if os.path.isdir(p)))
    site_dirs = tuple(dict.fromkeys(os.path.realpath(p) for p in site_dirs))
    found = _VERSION.search(config.get("version_info") or config.get("version") or "")
    version = f"{found.group(1)}.{found.group(2)}" if found else None
    if version is None and site_dirs:
        from_dir = _VERSION.search(os.path.basename(os.path.dirname(site_dirs[0])))
        version = f"{from_dir.group(1)}.{from_dir.group(2)}" if from_dir else None
    stdlib_dirs: tuple[str, ...] = ()
    home = config.get("home")
    if home and version:
        base = os.path.join(os.path.dirname(home.rstrip("/\\")), "lib", f"python{version}")
        stdlib_dirs = tuple(p for p in (base, os.path.join(base, "lib-dynload")) if os.path.isdir(p))
        system_site = os.path.join(base, "site-packages")
        if config.get("include-system-site-packages", "").lower() == "true" and os.path.isdir(system_site):
            site_dirs += (os.path.realpath(system_site),)  # the base interpreter's installs are importable too
    import_dirs = ["", "src", scripts_dir.strip("/")]
    stamps: list[object] = [_stat(os.path.join(venv, "pyvenv.cfg")), _stat(os.path.join(root, "uv.lock"))]
    for site in site_dirs:
        stamps.append((site, _stat(site)))
        more, pth_stamps = _pth_dirs(site, root)
        import_dirs += more
        stamps += pth_stamps
    return Environment(root=root, venv=venv if site_dirs else None,
                       version=version or _planned_version(root), site_dirs=site_dirs, stdlib_dirs=stdlib_dirs,
                       import_dirs=tuple(dict.fromkeys(import_dirs)), fingerprint=tuple(stamps))


_kept: dict[tuple[str, str], tuple[float, Environment]] = {}


def environment_of(root: str, scripts_dir: str) -> Environment:
    """The environment of the project at `root` (on this machine), read again after `_KEPT_SECONDS`."""
    real = os.path.realpath(root)
    key = (real, scripts_dir)
    now = time.monotonic()
    kept = _kept.get(key)
    if kept is not None and now - kept[0] < _KEPT_SECONDS:
        return kept[1]
    found = _read(real, scripts_dir)
    if len(_kept) >= _KEPT_ROOTS:
        _kept.clear()
    _kept[key] = (now, found)
    return found
