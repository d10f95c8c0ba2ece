"""One policy decision for all the workers of `serve --workers N`.

Each worker deciding for itself would serve different policies at times: a worker restarted after a crash reads
the file as it is now, and so would serve a widening edit the others hold (a held edit is only ever applied by
SIGHUP); workers reading an edit at slightly different moments can judge it against different served versions.
So only the parent reads the policy files and decides (its `PolicyManager`: live reload, held edits, SIGHUP), and
after every reload it publishes what it serves - each file's text as loaded, the refused files and the held edits
- in one state file (`publish_state`, written whole and renamed into place, so a reader never sees half of it).
A worker's `FollowerPolicies` loads exactly those texts, never the files, and reads the state again when the parent
sends SIGUSR1 (after each change, and once a worker is up). SIGHUP sent to a worker is sent on to the parent, so
that the operator's SIGHUP applies a held edit in every worker at once, whichever process it reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any

import structlog

from ... import telemetry
from ..errors import PolicyError
from .loader import LoadedPolicy, load_policy_text
from .manager import PolicyManager

__all__ = ["FollowerPolicies", "policy_state", "publish_state", "read_state"]

_log = structlog.get_logger("proxy.policy")

# What a worker is told when the state changed (SIGHUP is the operator's: apply held edits).
STATE_CHANGED = signal.SIGUSR1


def policy_state(manager: PolicyManager) -> dict[str, Any]:
    """What `manager` serves now: the main policy and each sibling as the text it was loaded from, and the
    refused files and held edits as /policies shows them."""
    current = manager.current()
    status = manager.status()
    siblings = [manager.get(entry["name"]) for entry in status["policies"][1:]]
    return {
        "main": _entry(current),
        "siblings": [_entry(p) for p in siblings if p is not None],
        "errors": status["errors"],
        "held": status["held"],
    }


def _entry(loaded: LoadedPolicy) -> dict[str, Any]:
    return {"file": str(loaded.path) if loaded.path is not None else None, "hash": loaded.hash, "text": loaded.text}


def publish_state(manager: PolicyManager, path: Path) -> bool:
    """Write `policy_state(manager)` to `path` (atomically); False when it says what the file already says."""
    data = json.dumps(policy_state(manager), sort_keys=True).encode()
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return False
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".policy-state-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return True


def read_state(path: Path) -> dict[str, Any]:
    return json.loads(path.read_bytes())


class FollowerPolicies(PolicyManager):
    """A worker's policies: what the parent published (`publish_state`), loaded from its texts. Reads nothing
    from the policy files and decides nothing; `status()` reports the parent's refused files and held edits."""

    def __init__(self, path: Path | str, state_file: Path | str, *, leader: int) -> None:
        self._state_file = Path(state_file)
        self._leader = leader
        self._state = read_state(self._state_file)
        self._loaded: dict[tuple[str | None, str], LoadedPolicy] = {}  # (file, hash) -> loaded: unchanged not reloaded
        self._follow_lock = threading.Lock()
        self._signals: asyncio.AbstractEventLoop | None = None
        super().__init__(path)

    def _load(self, entry: dict[str, Any]) -> LoadedPolicy:
        key = (entry["file"], entry["hash"])
        found = self._loaded.get(key)
        if found is None:
            file = entry["file"]
            path = Path(file) if file is not None else None
            found = self._loaded[key] = load_policy_text(entry["text"], file=file or "<policy>", path=path)
        return found

    def _load_main(self, *, first: bool = False, explicit: bool = False) -> LoadedPolicy | None:
        return self._load(self._state["main"])

    def _load_siblings(self, *, explicit: bool = False) -> None:
        siblings: dict[str, LoadedPolicy] = {}
        for entry in self._state["siblings"]:
            loaded = self._load(entry)
            siblings[loaded.name] = loaded
        self._siblings = siblings
        errors = {str(e["file"]): e for e in self._state["errors"]}
        # The metrics of this worker say what the parent's say: each refusal counted once, each served file valid.
        for file, error in errors.items():
            if getattr(self, "_errors", {}).get(file, {}).get("at") != error.get("at"):
                telemetry.emit(telemetry.PolicyFileRefused(file))
        for entry in [self._state["main"], *self._state["siblings"]]:
            if entry["file"] is not None and str(entry["file"]) not in errors:
                telemetry.emit(telemetry.PolicyFileLoaded(str(entry["file"])))
        self._errors = errors
        held = {str(e["file"]): e for e in self._state["held"]}
        for file in set(getattr(self, "_held", {})) - set(held):
            telemetry.emit(telemetry.PolicyFileHeld(file, False))
        for file in held:
            telemetry.emit(telemetry.PolicyFileHeld(file, True))
        self._held = held

    def reload(self, *, explicit: bool = False) -> bool:
        """Read the parent's state again and serve it."""
        with self._follow_lock:
            try:
                state = read_state(self._state_file)
                self._state = state
                current = self._load_main()
                self._load_siblings()
            except (OSError, ValueError, KeyError, PolicyError) as exc:  # the last state read keeps serving
                _log.error("policy.follow_failed", file=str(self._state_file), error=f"{type(exc).__name__}: {exc}")
                return False
            if current is not None and current.hash != self._current.hash:
                _log.info("policy.reloaded", file=str(current.path), name=current.name, hash=current.hash,
                          mode=current.mode)
            if current is not None:
                self._current = current
            live = {(e["file"], e["hash"]) for e in [state["main"], *state["siblings"]]}
            self._loaded = {k: v for k, v in self._loaded.items() if k in live}
            return True

    def apply_held(self) -> None:
        """SIGHUP reached this worker: the parent decides, and tells every worker."""
        _log.info("policy.sighup_forwarded", leader=self._leader)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self._leader, signal.SIGHUP)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError, AttributeError):
            loop.add_signal_handler(STATE_CHANGED, lambda: loop.run_in_executor(None, self.reload))
            loop.add_signal_handler(signal.SIGHUP, self.apply_held)
            self._signals = loop
        # What the parent published while this worker started (it is told of changes only once it is up).
        await asyncio.to_thread(self.reload)

    async def stop(self) -> None:
        loop, self._signals = self._signals, None
        if loop is not None:
            for sig in (STATE_CHANGED, signal.SIGHUP):
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(sig)
