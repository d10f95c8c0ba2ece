"""The policy watcher (proxy/policy/file/watch.py): what it reloads on, and that an idle proxy pays nothing for it."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from proxy.policy import PolicyManager
from proxy.policy.file import watch as policy_watch
from tests.conftest import voluntary_switches, woken

from .conftest import ROOT

STRICT = (ROOT / "policies" / "strict.yaml").read_text()
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify and /proc are Linux's")


def _strict(retry_budget: int) -> str:
    return STRICT.replace("retry_budget: 3 ", f"retry_budget: {retry_budget} ")


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "strict.yaml").write_text(STRICT)
    return directory


@pytest.fixture(autouse=True)
def quick_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy_watch, "_RETRY_SECONDS", 0.05)


async def _until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


@contextlib.asynccontextmanager
async def _watching(main: Path, *, debounce_ms: int) -> AsyncIterator[PolicyManager]:
    manager = PolicyManager(main, debounce_ms=debounce_ms)
    await manager.start()
    try:
        yield manager
    finally:
        await manager.stop()


def _budget(manager: PolicyManager) -> int:
    return manager.current().policy.retry_budget


def _count_reloads(manager: PolicyManager, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    runs: list[bool] = []
    reload = manager.reload

    def counting(*, explicit: bool = False) -> bool:
        runs.append(reload(explicit=explicit))
        return runs[-1]

    monkeypatch.setattr(manager, "reload", counting)
    return runs


async def test_a_burst_of_writes_reloads_once_with_the_last_one(
    policy_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _watching(policy_dir / "strict.yaml", debounce_ms=100) as manager:
        runs = _count_reloads(manager, monkeypatch)
        for budget in range(4, 20):  # an editor saving in pieces, a script rewriting the file in a loop
            (policy_dir / "strict.yaml").write_text(_strict(budget))
        assert await _until(lambda: _budget(manager) == 19)
        await asyncio.sleep(0.4)  # a second reload would have started by now
        assert runs == [True]


async def test_an_unrelated_file_does_not_reload(policy_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with _watching(policy_dir / "strict.yaml", debounce_ms=20) as manager:
        runs = _count_reloads(manager, monkeypatch)
        (policy_dir / ".strict.yaml.swp").write_text("x")
        (policy_dir / "notes.txt").write_text("x")
        (policy_dir / "strict.yaml").write_text(_strict(5))
        assert await _until(lambda: _budget(manager) == 5)
        await asyncio.sleep(0.2)
        assert runs == [True]


async def test_successive_configmap_updates_are_picked_up(tmp_path: Path) -> None:
    # What the kubelet does for each update of a mounted ConfigMap: a new `..<timestamp>` directory, a new
    # `..data_tmp` link renamed over `..data`, the old directory removed. The policy's own name is a link
    # through `..data` that never changes.
    def publish(stamp: str, text: str) -> Path:
        version = tmp_path / f"..2026_12_04_{stamp}"
        version.mkdir()
        (version / "strict.yaml").write_text(text)
        (tmp_path / "..data_tmp").symlink_to(version.name)
        os.rename(tmp_path / "..data_tmp", tmp_path / "..data")
        return version

    current = publish("a", STRICT)
    (tmp_path / "strict.yaml").symlink_to("..data/strict.yaml")
    async with _watching(tmp_path / "strict.yaml", debounce_ms=20) as manager:
        for stamp, budget in (("b", 2), ("c", 1)):
            previous, current = current, publish(stamp, _strict(budget))
            shutil.rmtree(previous)
            assert await _until(lambda budget=budget: _budget(manager) == budget), f"update {stamp} not seen"


async def test_a_directory_removed_and_recreated_is_watched_again(policy_dir: Path) -> None:
    main = policy_dir / "strict.yaml"
    async with _watching(main, debounce_ms=20) as manager:
        shutil.rmtree(policy_dir)
        assert await _until(lambda: bool(manager.status()["errors"])), "the missing file is not reported"
        assert _budget(manager) == 3  # the last good policy keeps serving
        await asyncio.sleep(0.2)  # the watcher looks for the directory a few times
        policy_dir.mkdir()
        main.write_text(_strict(6))
        assert await _until(lambda: _budget(manager) == 6), "the recreated directory is not watched"
        assert manager.status()["errors"] == []
        main.write_text(_strict(7))  # and the new directory's later edits too
        assert await _until(lambda: _budget(manager) == 7)


async def test_a_directory_replaced_by_a_rename_is_watched_again(policy_dir: Path) -> None:
    main = policy_dir / "strict.yaml"
    async with _watching(main, debounce_ms=20) as manager:
        staged = policy_dir.with_name("policies.new")
        staged.mkdir()
        (staged / "strict.yaml").write_text(_strict(2))
        policy_dir.rename(policy_dir.with_name("policies.old"))
        staged.rename(policy_dir)
        assert await _until(lambda: _budget(manager) == 2), "the directory moved into place is not read"
        (policy_dir.with_name("policies.old") / "strict.yaml").write_text(_strict(9))  # no longer the policy
        main.write_text(_strict(1))
        assert await _until(lambda: _budget(manager) == 1), "the directory moved into place is not watched"


async def _edits_seen_from_a_thread(manager: PolicyManager, main: Path) -> bool:
    """watchfiles starts watching in a thread of its own some time after start(), and a polling watcher compares
    sizes and modification times: edit until one is seen, each of another size."""
    await asyncio.sleep(0.3)
    for budget in (15, 16, 17):
        main.write_text(_strict(budget))
        if await _until(lambda budget=budget: _budget(manager) == budget, timeout=3.0):
            return True
    return False


async def test_the_watchfiles_fallback_reloads_on_edit(policy_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy_watch, "_inotify_available", lambda: False)  # macOS, or inotify limits spent
    async with _watching(policy_dir / "strict.yaml", debounce_ms=50) as manager:
        assert await _edits_seen_from_a_thread(manager, policy_dir / "strict.yaml")


@linux_only
async def test_spent_inotify_limits_fall_back_to_polling(policy_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncinotify

    def no_room(*_args: object) -> None:
        raise OSError(errno.ENOSPC, "inotify watch limit reached (fs.inotify.max_user_watches)")

    monkeypatch.setattr(asyncinotify.Inotify, "add_watch", no_room)
    async with _watching(policy_dir / "strict.yaml", debounce_ms=50) as manager:
        assert await _edits_seen_from_a_thread(manager, policy_dir / "strict.yaml")


@linux_only
async def test_an_idle_watcher_starts_no_thread_and_wakes_nothing(policy_dir: Path) -> None:
    threads = {thread.ident for thread in threading.enumerate()}
    async with _watching(policy_dir / "strict.yaml", debounce_ms=200):
        await asyncio.sleep(0.1)
        before = voluntary_switches()
        await asyncio.sleep(1.0)
        wakes = woken(before, voluntary_switches())
        # This thread wakes once, at the end of its sleep; watchfiles' thread alone would add ~20.
        assert sum(wakes.values()) <= 3, wakes
        assert {thread.ident for thread in threading.enumerate()} <= threads
        started = time.monotonic()
    assert time.monotonic() - started < 0.5  # stopping is prompt
