"""Shared fixtures of the policy tests: DESIGN.md's policy, the corpus, and the real shells."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from proxy.policy import Policy

ROOT = Path(__file__).resolve().parents[2]
CORPUS_PATH = ROOT / "tests" / "bash-allowlist.jsonl"
SHELLS = ("bash", "dash", "zsh")

# The policy of DESIGN.md "Policy files", which the corpus assumes.
DESIGN_POLICY: dict[str, Any] = {
    "name": "strict-uv-scripts",
    "mode": "enforce",
    "retry_budget": 3,
    "bash": {
        "tools": ["bash"],
        "command_argument": "command",
        "workdir_argument": "workdir",
        "scripts_dir": "scripts",
        "scripts": {"search": {"flags": ["--max-results"]}, "fetch_page": {}, "summarize": {}},
        "scripts_path": None,
    },
    "paths": {"read": "filePath", "edit": "filePath", "write": "filePath", "glob": "path", "grep": "path"},
    "other_tools": "allow",
    "feedback": "Rejected ({reasons}): only `uv run scripts/<name>.py [args]` may run. Scripts: {scripts}.",
    "loop_min_attempts": 3,
    "examples": {
        "allow": ['uv run scripts/search.py "rust async"'],
        "reject": ["uv run scripts/search.py | head -5", "timeout 30 uv run scripts/search.py"],
    },
}


def load_corpus() -> list[dict[str, Any]]:
    with CORPUS_PATH.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session")
def policy() -> Policy:
    return Policy.model_validate(DESIGN_POLICY)


@pytest.fixture(scope="session")
def shells() -> dict[str, str]:
    found = {name: shutil.which(name) for name in SHELLS}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        pytest.skip(f"shell(s) not installed: {', '.join(missing)} (CI installs bash, dash and zsh)")
    return {name: str(path) for name, path in found.items()}
