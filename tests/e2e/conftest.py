"""Fixtures for the OpenCode suite: the binary (skipped, or failed under E2E_REQUIRE_OPENCODE=1,
when it is missing) and a fresh OpenCode world per test."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.testing.scripted_upstream import ScriptedUpstream
from tests.e2e.harness import OpenCodeWorld, find_opencode


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: drives a real agent CLI (deselect with -m 'not e2e')")


@pytest.fixture
def backend() -> str:
    # What OpenCode sees does not depend on the store; the store suites cover Postgres.
    return "sqlite"


@pytest.fixture(scope="session")
def opencode_binary() -> Path:
    binary, detail = find_opencode()
    if binary is None:
        if os.environ.get("E2E_REQUIRE_OPENCODE") == "1":
            pytest.fail(detail)
        pytest.skip(detail)
    return binary


@pytest.fixture
def world(tmp_path: Path, opencode_binary: Path) -> OpenCodeWorld:
    return OpenCodeWorld(tmp_path / "opencode", opencode_binary)


def _exchange(upstream: ScriptedUpstream) -> str:
    """Each request the upstream got, as role:summary lines, for a failure report."""
    lines = []
    for i, body in enumerate(upstream.requests):
        lines.append(f"request {i} ({len(body.get('tools') or [])} tools):")
        for message in body.get("messages") or []:
            if message.get("role") == "system":
                continue
            shown = message.get("tool_calls") or message.get("content")
            lines.append(f"  {message.get('role')}: {json.dumps(shown, ensure_ascii=False)[:300]}")
    return "\n".join(lines)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    world = funcargs.get("world")
    if isinstance(world, OpenCodeWorld):
        for i, run in enumerate(world.runs):
            report.sections.append((f"opencode run {i}", run.describe()))
        report.sections.append(("uv stub calls", json.dumps(world.uv_calls())))
    upstream = funcargs.get("upstream")
    if isinstance(upstream, ScriptedUpstream):
        report.sections.append(("upstream requests", _exchange(upstream)))
