"""Write-then-run through the real proxy (issue 24): the write that the real `uv run scripts/search.py x`
or `git status` would then run (each shown to run in tests/policy/test_what_allowed_commands_run.py) is
refused at the write, on OpenCode's write, edit and patch tools, Claude Code's Write and Qwen Code's
write_file; the model is told, the refusal is recorded with reason `protected_path` and counted in the
error rate of /stats/models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_fail_closed_tools import run_cases

CLIENTS = Path(__file__).parent / "policy" / "client_tools"
SITE = ".venv/lib/python3.11/site-packages"
# The written file of each attack that the allowed command then runs.
RUN_BY_ALLOWED = ["scripts/search.py", "scripts/json.py", "pyproject.toml", f"{SITE}/zz_evil.pth",
                  f"{SITE}/sitecustomize.py", ".git/config"]
PAYLOAD = "import os; os.system('id')"


def _tools(client: str) -> list[dict[str, Any]]:
    """The client's captured catalogue as chat tools (Claude Code's is in the Messages API's form)."""
    tools: list[dict[str, Any]] = json.loads((CLIENTS / f"{client}.json").read_text())["tools"]
    return [tool if "function" in tool else {"type": "function", "function": {
        "name": tool["name"], "parameters": tool["input_schema"]}} for tool in tools]


def _patch(path: str) -> str:
    return f"*** Begin Patch\n*** Add File: {path}\n+{PAYLOAD}\n*** End Patch"


# client -> [(tool, arguments for a path)]: each file-writing shape of the client's own catalogue.
WRITES = {
    "opencode": [("write", lambda p: {"filePath": p, "content": PAYLOAD}),
                 ("edit", lambda p: {"filePath": p, "oldString": "x", "newString": PAYLOAD}),
                 ("apply_patch", lambda p: {"patchText": _patch(p)})],
    "claude-code": [("Write", lambda p: {"file_path": p, "content": PAYLOAD}),
                    ("Edit", lambda p: {"file_path": p, "old_string": "x", "new_string": PAYLOAD})],
    "qwen-code": [("write_file", lambda p: {"file_path": p, "content": PAYLOAD})],
}


@pytest.mark.parametrize("client", sorted(WRITES))
def test_the_write_an_allowed_command_would_run_is_refused(upstream, proxy, client: str) -> None:
    cases = [(tool, arguments(path), "protected_path", arguments("notes.md"))
             for tool, arguments in WRITES[client] for path in RUN_BY_ALLOWED]
    expected = run_cases(upstream, proxy, _tools(client), cases)
    rows = proxy.rows("SELECT tool_name, decision, primary_reason FROM tool_calls")
    assert sorted(map(tuple, rows), key=str) == sorted(expected, key=str)
    with proxy.client() as client_:
        stats = client_.get("/stats/models").json()["models"][0]
    assert stats["reasons"].get("protected_path") == len(cases)
    assert stats["errors"] == len(cases)
