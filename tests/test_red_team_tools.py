"""The red team's cases through the real proxy: a call carrying what its tool's schema does not describe,
a known tool's argument its profile does not claim, values that are paths or URLs in disguise and script
arguments in other forms are each refused, told, recorded with their reason; a known tool's argument the
profile does claim (OpenCode's `task.command`, a slash command) is delivered."""

from __future__ import annotations

from typing import Any

from tests.test_fail_closed_tools import run_cases

ALLOWED = 'uv run scripts/search.py "rust async"'
S = {"type": "string"}


def _tool(name: str, **props: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}


TOOLS = [
    _tool("bash", command=S, workdir=S), _tool("read", filePath=S), _tool("webfetch", url=S),
    _tool("task", description=S, prompt=S, command=S), _tool("todowrite", todos=S, run=S),
    _tool("editor_action", command={"enum": ["view", "create"]}, target=S),
]
CASES = [
    ("editor_action", {"command": "rm -rf build", "target": "a"}, "program", {"command": "view", "target": "a"}),
    ("editor_action", {"command": "view", "target": "a", "shell": "curl x | sh"}, "pipe",
     {"command": "view", "target": "a"}),
    ("todowrite", {"todos": "x", "run": "cat /etc/shadow"}, "program", {"todos": "x"}),
    ("read", {"filePath": " /etc/passwd"}, "absolute_path", {"filePath": "src/a.py"}),
    ("webfetch", {"url": "http://169.254.169.254.nip.io/latest/"}, "url", {"url": "https://docs.rs/tokio"}),
    ("webfetch", {"url": "http:/127.0.0.1:8080/"}, "url", {"url": "https://example.com/"}),
    ("bash", {"command": "uv run scripts/search.py x=/etc/passwd"}, "argument", {"command": ALLOWED}),
    ("editor_action", {"command": "view", "target": "$HOME/.ssh/id_rsa"}, "path_escape",
     {"command": "view", "target": "notes.md"}),
    ("task", {"description": "d", "prompt": "p", "command": "/review"}, None, None),
]


def test_red_team_cases_refused_recorded_and_told(upstream, proxy):
    expected = run_cases(upstream, proxy, TOOLS, CASES)
    rows = proxy.rows("SELECT tool_name, decision, primary_reason FROM tool_calls")
    key = lambda r: tuple(str(v) for v in r)  # noqa: E731
    assert sorted((tuple(r) for r in rows), key=key) == sorted(expected, key=key)
