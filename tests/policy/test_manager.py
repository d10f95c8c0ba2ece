"""PolicyManager: siblings, reload (good and bad edits), status, metrics, and the file watcher."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest

from proxy.policy import PolicyError, PolicyManager
from proxy.stats.prometheus import REGISTRY

from .conftest import ROOT


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    for name in ("strict.yaml", "observe.yaml"):
        shutil.copy(ROOT / "policies" / name, directory / name)
    return directory


def _failures(file: Path) -> float:
    return REGISTRY.get_sample_value("allowlist_proxy_policy_reload_failures_total", {"file": str(file)}) or 0.0


def _valid(file: Path) -> float | None:
    return REGISTRY.get_sample_value("allowlist_proxy_policy_valid", {"file": str(file)})


def test_loads_main_and_siblings(policy_dir: Path) -> None:
    manager = PolicyManager(policy_dir / "strict.yaml")
    assert manager.current().name == "strict-uv-scripts"
    assert manager.get("observe-uv-scripts").policy.mode == "observe"  # type: ignore[union-attr]
    assert manager.get("strict-uv-scripts") is manager.current()
    assert manager.get("nope") is None
    status = manager.status()
    assert status["active"] == {
        "name": "strict-uv-scripts", "path": str(policy_dir / "strict.yaml"),
        "hash": manager.current().hash, "mode": "enforce",
        "profiles": ["opencode", "qwen-code", "claude-code", "codex", "openai-responses", "text-actions", "cline",
                     "continue", "kilo", "open-interpreter", "gemini-cli", "roo-code", "aider"],
        "project_root": [],
    }  # fmt: skip
    assert [p["name"] for p in status["policies"]] == ["strict-uv-scripts", "observe-uv-scripts"]
    assert status["errors"] == []
    assert _valid(policy_dir / "strict.yaml") == 1


def test_first_load_failure_raises(policy_dir: Path) -> None:
    (policy_dir / "strict.yaml").write_text("name: [\n")
    with pytest.raises(PolicyError):
        PolicyManager(policy_dir / "strict.yaml")


def test_bad_sibling_is_recorded_not_fatal(policy_dir: Path) -> None:
    (policy_dir / "broken.yaml").write_text("name: broken\nmode: loud\n")
    manager = PolicyManager(policy_dir / "strict.yaml")
    errors = manager.status()["errors"]
    assert len(errors) == 1
    assert errors[0]["file"] == str(policy_dir / "broken.yaml")
    assert (errors[0]["line"], errors[0]["key"]) == (2, "mode")
    assert manager.get("broken") is None


def test_duplicate_sibling_name_is_an_error(policy_dir: Path) -> None:
    shutil.copy(policy_dir / "observe.yaml", policy_dir / "observe2.yaml")
    errors = PolicyManager(policy_dir / "strict.yaml").status()["errors"]
    assert [e["key"] for e in errors] == ["name"]


def test_reload_good_edit_switches(policy_dir: Path) -> None:
    main = policy_dir / "strict.yaml"
    manager = PolicyManager(main)
    before = manager.current()
    main.write_text(main.read_text().replace("retry_budget: 3 ", "retry_budget: 7 "))
    assert manager.reload() is True
    after = manager.current()
    assert after.policy.retry_budget == 7 and after.hash != before.hash
    assert manager.status()["active"]["hash"] == after.hash


def test_reload_bad_edit_keeps_last_good(policy_dir: Path) -> None:
    main = policy_dir / "strict.yaml"
    manager = PolicyManager(main)
    good = manager.current()
    failures = _failures(main)
    main.write_text(main.read_text().replace('      flags: ["--max-results"]', "      flags: x"))
    assert manager.reload() is False
    assert manager.current() is good
    (error,) = manager.status()["errors"]
    assert error["file"] == str(main) and error["key"] == "shell.scripts.search.flags"
    line = 1 + next(i for i, t in enumerate(main.read_text().splitlines()) if t.startswith("      flags: x"))
    assert error["line"] == line and "expected a list of strings" in error["message"] and error["at"]
    assert _failures(main) == failures + 1
    assert _valid(main) == 0
    # Fixing the file clears the error and the gauge.
    shutil.copy(ROOT / "policies" / "strict.yaml", main)
    assert manager.reload() is True
    assert manager.status()["errors"] == [] and _valid(main) == 1


def test_reload_refuses_misjudged_examples(policy_dir: Path) -> None:
    main = policy_dir / "strict.yaml"
    manager = PolicyManager(main)
    # Loosening the rules without fixing the examples: the self-test catches it.
    main.write_text(
        main.read_text().replace(
            'flags: ["--max-results"]', 'flags: ["--max-results", "--no-agent"]'
        )
    )
    assert manager.reload() is False
    assert manager.status()["errors"][0]["key"].startswith("examples.reject")


def test_current_is_cheap(policy_dir: Path) -> None:
    manager = PolicyManager(policy_dir / "strict.yaml")
    start = time.perf_counter()
    for _ in range(100_000):
        manager.current()
    assert (time.perf_counter() - start) / 100_000 < 5e-6


async def _wait_for(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return False


async def test_watcher_reloads_on_edit(policy_dir: Path) -> None:
    main = policy_dir / "strict.yaml"
    manager = PolicyManager(main, debounce_ms=50)
    await manager.start()
    try:
        await asyncio.sleep(0.3)  # let the watcher settle before the first edit
        first = manager.current().hash
        main.write_text(main.read_text().replace("retry_budget: 3 ", "retry_budget: 5 "))
        assert await _wait_for(lambda: manager.current().hash != first), "watcher did not pick up a good edit"
        assert manager.current().policy.retry_budget == 5
        good = manager.current()
        main.write_text(main.read_text().replace("mode: enforce ", "mode: maybe "))
        assert await _wait_for(lambda: bool(manager.status()["errors"])), "watcher did not report a bad edit"
        assert manager.current() is good
    finally:
        await manager.stop()
    await manager.stop()  # idempotent
