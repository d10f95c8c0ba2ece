"""Watching the policy directory: call back after a change, and cost nothing while nothing changes.

On Linux the directory's inotify descriptor is read by the event loop itself (asyncinotify registers it with
`add_reader`), and the debounce is a loop timer armed only by an event: an idle proxy has no thread and no
timer for this. watchfiles, the fallback where inotify is missing (macOS) or refused (the per-user limits),
polls from a thread of its own 20 times a second; on this kind of machine each of those wake-ups costs
~100 us of CPU, idle or not, which is why it is not the default.

The directory may vanish or be replaced (`rm -r` and recreate, `mv` over it, an unmount): the watch is then
set again on the same path, retried once a second while nothing is there, and the callback runs once it is
back, since what it holds may differ from what was loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from asyncinotify import Inotify, Mask, Watch

__all__ = ["POLICY_SUFFIXES", "is_relevant", "watch_directory"]

_log = structlog.get_logger("proxy.policy")
POLICY_SUFFIXES = (".yaml", ".yml")
_RETRY_SECONDS = 1.0
# A writer that never pauses still gets its file reloaded this many quiet periods after its first write.
_LONGEST_DELAY_FACTOR = 5
# The inotify limits (fs.inotify.max_user_instances / max_user_watches) are spent: not a missing directory to wait
# for, so watch by polling instead.
_LIMIT_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.ENOMEM)


def is_relevant(name: str) -> bool:
    """Whether a change to this directory entry can change a policy.

    Kubernetes mounts a ConfigMap as `..data` -> `..<timestamp>/` and updates it by swapping that symlink:
    the policy's own name never changes, only these do.
    """
    return name.endswith(POLICY_SUFFIXES) or name.startswith("..")


def _inotify_available() -> bool:
    return sys.platform.startswith("linux")


class _Debounce:
    """Calls `fire` `quiet` seconds after the last `poke`, and at most `longest` after the first of a burst."""

    def __init__(self, quiet: float, fire: Callable[[], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._quiet = quiet
        self._longest = quiet * _LONGEST_DELAY_FACTOR
        self._fire = fire
        self._first: float | None = None
        self._handle: asyncio.TimerHandle | None = None

    def poke(self) -> None:
        now = self._loop.time()
        if self._first is None:
            self._first = now
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_at(min(now + self._quiet, self._first + self._longest), self._due)

    def _due(self) -> None:
        self._first = self._handle = None
        self._fire()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._first = self._handle = None


async def _call_when_due(due: asyncio.Event, on_change: Callable[[], Awaitable[object]]) -> None:
    """Run `on_change` once per `due`; changes made while it runs set `due` again, so they get a run of their own."""
    while True:
        await due.wait()
        due.clear()
        try:
            await on_change()
        except Exception:
            _log.exception("policy.reload_failed")


async def watch_directory(
    directory: Path, on_change: Callable[[], Awaitable[object]], *, debounce: float, ready: asyncio.Event
) -> None:
    """Await `on_change()` `debounce` seconds after the last change to a relevant entry of `directory` (see
    `is_relevant`), until cancelled. Runs of `on_change` never overlap. `ready` is set once changes are seen
    (the first watch is in place or the directory is missing, or once watchfiles takes over)."""
    due = asyncio.Event()
    caller = asyncio.create_task(_call_when_due(due, on_change), name="policy-reload")
    try:
        if _inotify_available():
            try:
                await _watch_inotify(directory, due, debounce, ready)
                return
            except (ImportError, RuntimeError, OSError) as error:
                # The limits spent, or no usable inotify (a libc without it, the package missing): poll rather
                # than stop seeing edits.
                _log.warning("policy.watch_polling", directory=str(directory), reason=str(error))
        ready.set()
        await _watch_watchfiles(directory, due, debounce, force_polling=_inotify_available())
    finally:
        ready.set()
        caller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await caller


# -- Linux: inotify read by the event loop --------------------------------------------------------------


def _directory_mask() -> Mask:
    from asyncinotify import Mask

    return (
        Mask.CREATE | Mask.DELETE | Mask.MODIFY | Mask.CLOSE_WRITE | Mask.ATTRIB | Mask.MOVED_FROM
        | Mask.MOVED_TO | Mask.DELETE_SELF | Mask.MOVE_SELF | Mask.ONLYDIR
    )  # fmt: skip


async def _watch_inotify(directory: Path, due: asyncio.Event, debounce: float, ready: asyncio.Event) -> None:
    from asyncinotify import Inotify

    debounce_timer = _Debounce(debounce, due.set)
    with Inotify() as inotify:
        try:
            lost = False
            while True:
                watch = await _add_watch(inotify, directory, ready)
                if lost:
                    _log.info("policy.watch_resumed", directory=str(directory))
                    debounce_timer.poke()  # back after a gap: files may have changed while nothing watched
                await _read_until_lost(inotify, watch, debounce_timer)
                lost = True
        finally:
            debounce_timer.cancel()


async def _add_watch(inotify: Inotify, directory: Path, ready: asyncio.Event) -> Watch:
    """The watch on `directory`, once there is a directory there (checked once a second while there is none)."""
    warned = False
    while True:
        try:
            watch = inotify.add_watch(directory, _directory_mask())
            ready.set()
            return watch
        except OSError as error:
            if error.errno in _LIMIT_ERRNOS:
                raise
            ready.set()
            if not warned:
                warned = True
                _log.warning("policy.watch_waiting", directory=str(directory), reason=error.strerror)
        await asyncio.sleep(_RETRY_SECONDS)


async def _read_until_lost(inotify: Inotify, watch: Watch, debounce: _Debounce) -> None:
    """Poke `debounce` for each relevant event; return once the kernel no longer watches `directory` itself."""
    from asyncinotify import Mask

    gone = Mask.IGNORED | Mask.DELETE_SELF | Mask.MOVE_SELF | Mask.UNMOUNT
    async for event in inotify:
        mask = event.mask
        if Mask.Q_OVERFLOW in mask:
            debounce.poke()  # events were dropped: one of them may have been relevant
        elif mask & gone:
            if event.watch is not watch:
                continue  # the end of a watch already replaced
            if Mask.IGNORED not in mask:
                # Moved away, the watch would follow the old directory; deleted, it is ending anyway.
                _remove(inotify, watch)
            debounce.poke()  # the files went with it: report them missing now, not at the next edit
            return
        elif event.name is not None and is_relevant(event.name.name):
            debounce.poke()


def _remove(inotify: Inotify, watch: Watch) -> None:
    with contextlib.suppress(OSError):  # already gone (EINVAL): the kernel removed it first
        inotify.rm_watch(watch)


# -- elsewhere: watchfiles --------------------------------------------------------------------------------


async def _watch_watchfiles(directory: Path, due: asyncio.Event, debounce: float, *, force_polling: bool) -> None:
    from watchfiles import awatch

    def relevant(_change: Any, name: str) -> bool:
        return is_relevant(Path(name).name)

    while True:
        try:
            async for _changes in awatch(
                directory, watch_filter=relevant, debounce=int(debounce * 1000), step=50, recursive=False,
                force_polling=force_polling,
            ):  # fmt: skip
                due.set()
        except Exception:
            # The directory vanished or the watcher failed: keep serving, try again shortly.
            _log.exception("policy.watch_failed", directory=str(directory))
            await asyncio.sleep(_RETRY_SECONDS)
