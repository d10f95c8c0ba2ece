"""The policies being served: the main one, its siblings, hot reload, and what went wrong.

`current()` is read on every request, so it is one attribute read; a reload swaps the whole `LoadedPolicy`
in one assignment, so a request sees either the old policy or the new one, never a mix. A file that fails
to load never replaces a good policy: the last good one keeps serving, and the error is kept for
`/policies`, logged, and counted in the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
import yaml

from ... import telemetry
from ...errors import BadRequest
from ..errors import PolicyError
from ..paths.protected import register_own_files
from ..schema import Policy
from ..tools.profiles import profile_table
from .loader import LoadedPolicy, load_policy_file
from .reload_guard import reload_verdict
from .watch import POLICY_SUFFIXES, watch_directory

__all__ = ["PolicyManager", "apply_command", "held_summary"]

_log = structlog.get_logger("proxy.policy")


# A file changed this recently may still be being written: wait until it holds still this long.
_STABLE_SECONDS = 0.25
_STABLE_WAIT_MAX = 3.0


def _wait_until_stable(path: Path) -> None:
    """Return once the file's size and time stopped changing (runs in the reload thread, never the loop)."""
    deadline = time.monotonic() + _STABLE_WAIT_MAX
    try:
        last = path.stat()
        while time.time() - last.st_mtime < _STABLE_SECONDS and time.monotonic() < deadline:
            time.sleep(_STABLE_SECONDS)
            now = path.stat()
            if (now.st_size, now.st_mtime_ns) == (last.st_size, last.st_mtime_ns):
                return
            last = now
    except OSError:
        return  # the load itself reports the missing file


def _policy_keys() -> frozenset[str]:
    keys = set(Policy.model_fields)
    for field in Policy.model_fields.values():
        alias = field.validation_alias
        if alias is not None and not isinstance(alias, str):
            keys.update(str(choice) for choice in getattr(alias, "choices", ()))
    return frozenset(keys)


_POLICY_KEYS = _policy_keys()


def is_policy_file(path: Path) -> bool:
    """False for a YAML mapping none of whose top-level keys a policy has (the packaged
    `tool-profiles.yaml`, an editor's or another tool's config): data beside the policies, not a broken policy.

    Anything else is read as a policy, so a policy the operator broke (bad YAML, a missing `name`) is still
    reported. Composing the node tree is linear in the file (aliases are not expanded).
    """
    try:
        if path.stat().st_size > (1 << 20):
            return True  # the loader refuses it by size, naming the file
        # libyaml where present, as the loader: the pure-Python composer took longer than loading the policy.
        node = yaml.compose(path.read_text(encoding="utf-8", errors="replace"),
                            Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError):
        return True
    if not isinstance(node, yaml.MappingNode):
        return True
    return any(str(key.value) in _POLICY_KEYS for key, _ in node.value)


class _Held(Exception):
    """A widening reload: kept aside until the operator applies it (SIGHUP)."""

    def __init__(self, reason: str, widens: tuple[str, ...]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.widens = widens


def _check_reload(current: LoadedPolicy, loaded: LoadedPolicy, path: Path, *, explicit: bool = False) -> None:
    verdict = reload_verdict(current, loaded, explicit=explicit)
    if verdict.action == "refuse":
        raise PolicyError(f"reload refused: {verdict.reason}", file=str(path), line=1)
    if verdict.action == "hold":
        raise _Held(verdict.reason or "widens the policy", verdict.widens)


def held_summary(entry: dict[str, Any]) -> str:
    """A held edit (`PolicyManager.held`) in a sentence: the file, what it widens, what serves meanwhile, and
    how to apply it; /health, the webhook and `allowlist-proxy policy status` say it so."""
    widens = entry.get("widens") or []
    what = "; ".join(widens[:3]) + (f" (and {len(widens) - 3} more)" if len(widens) > 3 else "")
    return (f"{entry['file']}: an edit that widens the policy is held ({what or entry['reason']}); the policy "
            f"before it keeps serving. Apply it with `{entry['apply']}`, or revert the file")


def apply_command() -> str:
    """The command that applies a held edit: SIGHUP to this process (the one that watches the files)."""
    return f"kill -HUP {os.getpid()}"


class PolicyManager:
    def __init__(self, path: Path | str, *, debounce_ms: int = 200) -> None:
        self.path = Path(path)  # as given, so messages read like the operator's own path
        self.directory = self.path.absolute().parent
        # The served policy is not the agent's to change: its file and the policies dir are protected paths.
        register_own_files((str(self.path),), policy_dirs=(str(self.directory),))
        self._reload_lock = threading.Lock()
        self._debounce_ms = debounce_ms
        self._errors: dict[str, dict[str, Any]] = {}  # file -> its current error
        self._hashes: dict[str, str] = {}  # file -> hash of the version last loaded from it
        self._siblings: dict[str, LoadedPolicy] = {}
        self._held: dict[str, dict[str, Any]] = {}  # file -> the widening version not applied
        self._task: asyncio.Task[None] | None = None
        self._sighup: asyncio.AbstractEventLoop | None = None
        # Called (in the reloading thread) after every reload, whatever it decided: `serve --workers N` publishes
        # what its parent serves to the workers (proxy/policy/file/shared.py).
        self.reloaded: list[Callable[[], None]] = []
        self._current: LoadedPolicy = self._load_main(first=True)  # type: ignore[assignment]
        self._load_siblings()

    # -- reading --------------------------------------------------------------------------------------

    def current(self) -> LoadedPolicy:
        """The last good main policy."""
        return self._current

    def get(self, name: str) -> LoadedPolicy | None:
        """A loaded policy by its `name`: the main one or a good sibling."""
        current = self._current
        if name == current.name:
            return current
        return self._siblings.get(name)

    def pick(self, wanted: str | None, *, by_header: bool) -> LoadedPolicy:
        """The one policy-selection rule: the main policy, unless `by_header` (the `policy_header` setting) and
        the request's `x-allowlist-policy` header names another loaded policy (a name none has is a 400)."""
        if not wanted or not by_header:
            return self._current
        found = self.get(wanted)
        if found is None:
            raise BadRequest(f"x-allowlist-policy names no loaded policy: {wanted!r}", param="x-allowlist-policy")
        return found

    # -- loading --------------------------------------------------------------------------------------

    def _file_key(self, path: Path) -> str:
        return str(path)

    def _record_error(self, path: Path, error: PolicyError) -> None:
        file = self._file_key(path)
        entry = {
            "file": error.file or file,
            "line": error.line,
            "key": error.key,
            "message": error.message,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        previous = self._errors.get(file)
        if previous is not None and all(previous[k] == entry[k] for k in ("line", "key", "message")):
            entry["at"] = previous["at"]  # the same error seen again: keep when it first appeared
        self._errors[file] = entry
        telemetry.emit(telemetry.PolicyFileRefused(file))
        _log.error("policy.refused", file=entry["file"], line=error.line, key=error.key, error=error.message)

    def _record_good(self, path: Path, loaded: LoadedPolicy) -> None:
        file = self._file_key(path)
        self._errors.pop(file, None)
        self._drop_held(file)
        telemetry.emit(telemetry.PolicyFileLoaded(file))
        if self._hashes.get(file) != loaded.hash:
            if file in self._hashes:
                _log.info("policy.reloaded", file=file, name=loaded.name, hash=loaded.hash, mode=loaded.mode)
            self._hashes[file] = loaded.hash

    def _record_held(self, path: Path, loaded: LoadedPolicy, held: _Held, served: LoadedPolicy | None) -> None:
        file = self._file_key(path)
        previous = self._held.get(file)
        if previous is None or previous["hash"] != loaded.hash:
            _log.warning("policy.reload_held", file=file, name=loaded.name, hash=loaded.hash, reason=held.reason,
                         widens=list(held.widens), apply=apply_command())
        self._held[file] = {
            "file": file, "name": loaded.name, "hash": loaded.hash, "reason": held.reason,
            # What the edit allows that the served version does not, and how the operator applies it.
            "widens": list(held.widens), "served_hash": served.hash if served is not None else None,
            "apply": apply_command(),
            # Since when this version is held (the same edit seen again keeps its first time).
            "at": previous["at"] if previous is not None and previous["hash"] == loaded.hash
            else datetime.now(UTC).isoformat(timespec="seconds"),
        }
        telemetry.emit(telemetry.PolicyFileHeld(file, True))

    def _drop_held(self, file: str) -> None:
        """The file no longer holds a widening edit (applied, reverted, broken or gone)."""
        self._held.pop(file, None)
        telemetry.emit(telemetry.PolicyFileHeld(file, False))

    def _load_main(self, *, first: bool = False, explicit: bool = False) -> LoadedPolicy | None:
        try:
            if not first:
                _wait_until_stable(self.path)
            loaded = load_policy_file(self.path)
            if not first:
                _check_reload(self._current, loaded, self.path, explicit=explicit)
        except _Held as held:
            self._errors.pop(self._file_key(self.path), None)
            self._record_held(self.path, loaded, held, self._current)
            return None
        except PolicyError as error:
            # What the file holds now is this error, not the edit held before it: SIGHUP would not apply that.
            if not first:
                self._drop_held(self._file_key(self.path))
            self._record_error(self.path, error)
            if first:
                raise
            return None
        self._record_good(self.path, loaded)
        return loaded

    def _load_siblings(self, *, explicit: bool = False) -> None:
        siblings: dict[str, LoadedPolicy] = {}
        try:
            paths = sorted(
                self.path.parent / p.name
                for p in self.directory.iterdir()
                if p.suffix in POLICY_SUFFIXES and p.is_file()
            )
        except OSError:
            paths = []
        present = {self._file_key(p) for p in paths}
        for file in list(self._errors):
            if file not in present and file != self._file_key(self.path):
                self._errors.pop(file)  # a deleted file has no error any more
        for file in list(self._held):
            if file not in present and file != self._file_key(self.path):
                self._drop_held(file)  # nor a held edit
        for path in paths:
            if path.resolve() == self.path.resolve() or not is_policy_file(path):
                continue
            previous = next((p for p in self._siblings.values() if p.path == path), None)
            try:
                loaded = load_policy_file(path)
                if previous is not None:
                    _check_reload(previous, loaded, path, explicit=explicit)
            except _Held as held:
                self._record_held(path, loaded, held, previous)
                if previous is not None:
                    siblings.setdefault(previous.name, previous)  # keep serving the version before
                continue
            except PolicyError as error:
                self._drop_held(self._file_key(path))
                self._record_error(path, error)
                if previous is not None:
                    siblings.setdefault(previous.name, previous)  # keep serving its last good version
                continue
            if loaded.name == self._current.name or loaded.name in siblings:
                self._record_error(
                    path, PolicyError(f"policy name {loaded.name!r} is already used by another file",
                                      file=str(path), line=1, key="name"),
                )  # fmt: skip
                continue
            self._record_good(path, loaded)
            siblings[loaded.name] = loaded
        self._siblings = siblings

    def reload(self, *, explicit: bool = False) -> bool:
        """Re-read every policy file now. False when the main file was refused or held (the last good one
        stays). `explicit` (SIGHUP): the operator applies a widening edit too."""
        with self._reload_lock:
            loaded = self._load_main(explicit=explicit)
            if loaded is not None:
                self._current = loaded
            self._load_siblings(explicit=explicit)
            for listener in self.reloaded:
                listener()
            return loaded is not None

    def apply_held(self) -> None:
        """SIGHUP: re-read the files and apply them, widening or not (a cut-short file is still refused)."""
        _log.info("policy.sighup", held=sorted(self._held))
        self.reload(explicit=True)

    # -- watching -------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Watch the policy directory and reload after every change, in a background task (proxy/policy/file/watch.py:
        event-driven on Linux, nothing runs while nothing changes)."""
        if self._task is not None:
            return
        ready = asyncio.Event()
        self._task = asyncio.create_task(
            watch_directory(self.directory, self._reload_in_thread, debounce=self._debounce_ms / 1000, ready=ready),
            name="policy-watch",
        )
        # An edit made once start() returned is seen.
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        loop = asyncio.get_running_loop()
        # Only the main thread may take signals; a proxy served from another thread (tests) has no SIGHUP.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError, AttributeError):
            loop.add_signal_handler(signal.SIGHUP, lambda: loop.run_in_executor(None, self.apply_held))
            self._sighup = loop

    async def stop(self) -> None:
        task, self._task = self._task, None
        if self._sighup is not None:
            with contextlib.suppress(Exception):
                self._sighup.remove_signal_handler(signal.SIGHUP)
            self._sighup = None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    async def _reload_in_thread(self) -> None:
        # The reload reads and judges files (and waits for a file still being written): never on the loop.
        await asyncio.to_thread(self.reload)

    # -- reporting ------------------------------------------------------------------------------------

    def held(self) -> list[dict[str, Any]]:
        """The widening edits not applied, by file: `widens` (what each allows more), `apply` (the command)."""
        return sorted(self._held.values(), key=lambda e: str(e["file"]))

    def status(self) -> dict[str, Any]:
        """The body of GET /policies."""
        current = self._current

        def describe(loaded: LoadedPolicy) -> dict[str, Any]:
            return {
                "name": loaded.name,
                "path": str(loaded.path) if loaded.path else None,
                "hash": loaded.hash,
                "mode": loaded.mode,
                # The tool profiles requests are judged through, and the project roots absolute paths may name.
                "profiles": list(profile_table(loaded.policy).profiles),
                "project_root": list(loaded.policy.paths.project_root),
            }

        return {
            "active": describe(current),
            "policies": [describe(current)] + [describe(p) for _, p in sorted(self._siblings.items())],
            "errors": sorted(self._errors.values(), key=lambda e: str(e["file"])),
            # Widening edits not applied: SIGHUP to the serving process applies them.
            "held": self.held(),
        }
