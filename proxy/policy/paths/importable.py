"""Every top-level name something in a project's environment could import, computed off the request path.

The names are the standard library's (the proxy's own, the target interpreter's directory, the newer
Pythons') and every name imported anywhere in the installed distributions' source, optional and conditional
imports included (proxy/policy/paths/import_text.py). Reading an environment's source takes about a second
per 50 MB, so it runs in a child process (`python -I -S import_text.py`: no import of the environment, no
share of the serving process's GIL) started from a daemon thread, and is kept per root until the
environment's fingerprint changes (an install, a `.pth` file, `uv.lock`).

A caller that runs on an event loop waits at most `COLD_WAIT_SECONDS` for a computation that is not done
(`warm` starts it as soon as a request names the root); meanwhile it gets None and judges as if the
environment could not be read, which refuses more. A failed computation is tried again after
`_RETRY_SECONDS`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from .environment import Environment

__all__ = ["COLD_WAIT_SECONDS", "ImportableNames", "importable_names", "warm"]

COLD_WAIT_SECONDS = 0.25
_SCAN_SECONDS = 300.0
_RETRY_SECONDS = 30.0
_KEPT_ROOTS = 32
_SCANNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "import_text.py")


@dataclass(frozen=True, slots=True)
class ImportableNames:
    """The names, and what reading them took (for the figures)."""

    names: frozenset[str]  # the distributions' imports and the standard library's names
    stdlib: frozenset[str]
    distributions: int
    files: int
    bytes: int
    seconds: float  # the scan's own time, in the child process


@dataclass(slots=True)
class _Entry:
    fingerprint: tuple[object, ...]
    future: Future[ImportableNames | None]
    failed_at: float | None = None


_lock = threading.Lock()
_kept: dict[str, _Entry] = {}


def _scan(env: Environment) -> ImportableNames | None:
    request = json.dumps({"site": list(env.site_dirs), "stdlib": list(env.stdlib_dirs)})
    try:
        done = subprocess.run([sys.executable, "-I", "-S", _SCANNER, request], capture_output=True,
                              timeout=_SCAN_SECONDS, check=True)
        found = json.loads(done.stdout)
        return ImportableNames(names=frozenset(found["imported"]) | frozenset(found["stdlib"]),
                               stdlib=frozenset(found["stdlib"]), distributions=int(found["distributions"]),
                               files=int(found["files"]), bytes=int(found["bytes"]), seconds=float(found["seconds"]))
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
        return None


def _run(env: Environment, entry: _Entry) -> None:
    found = _scan(env)
    if found is None:
        entry.failed_at = time.monotonic()
    entry.future.set_result(found)


def _entry(env: Environment) -> _Entry:
    with _lock:
        entry = _kept.get(env.root)
        stale = entry is None or entry.fingerprint != env.fingerprint or (
            entry.failed_at is not None and time.monotonic() - entry.failed_at > _RETRY_SECONDS)
        if stale:
            entry = _Entry(env.fingerprint, Future())
            if len(_kept) >= _KEPT_ROOTS:
                _kept.clear()
            _kept[env.root] = entry
            threading.Thread(target=_run, args=(env, entry), name="allowlist-imports", daemon=True).start()
        assert entry is not None
        return entry


def warm(env: Environment) -> None:
    """Start computing the environment's names (if it has one and they are not known): returns at once."""
    if env.readable:
        _entry(env)


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def importable_names(env: Environment, *, wait: float | None = None) -> ImportableNames | None:
    """The names of a readable environment; None while they are being computed (past the wait) or when
    they could not be. `wait` None: `COLD_WAIT_SECONDS` on an event loop, else as long as the scan takes."""
    if not env.readable:
        return None
    future = _entry(env).future
    if future.done():
        return future.result()
    if wait is None:
        wait = COLD_WAIT_SECONDS if _on_event_loop() else _SCAN_SECONDS
    try:
        return future.result(timeout=wait)
    except FutureTimeout:
        return None
