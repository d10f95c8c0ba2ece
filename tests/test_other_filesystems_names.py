"""Names as other filesystems read them, through the real proxy (issue 38): the agent may run on macOS or
Windows while the proxy judges here; a write or read of a protected file spelled as HFS+ or NTFS would open
it (an ignorable code point, an alternate data stream, an 8.3 short name) is refused on each client's own
tools, told, recorded as `protected_path` and counted; the model's plain retry is delivered."""

from __future__ import annotations

from tests.test_protected_paths import _patch, _run

CASES = [
    ("opencode", "write", {"filePath": ".g\u200cit/config", "content": "[core]\n\tfsmonitor = x"},
     {"filePath": "docs/git.md", "content": "x"}),
    ("opencode", "edit", {"filePath": "GIT~1/hooks/pre-commit", "oldString": "a", "newString": "b"},
     {"filePath": "docs/hooks.md", "oldString": "a", "newString": "b"}),
    ("opencode", "apply_patch", {"patchText": _patch("*** Add File: SCRIPT~1/search.py", "+import os")},
     {"patchText": _patch("*** Add File: docs/search.md", "+x")}),
    ("claude-code", "Write", {"file_path": ".git::$INDEX_ALLOCATION/hooks/pre-commit", "content": "x"},
     {"file_path": "docs/pre-commit.md", "content": "x"}),
    ("claude-code", "Edit", {"file_path": "pyproject.toml::$DATA", "old_string": "a", "new_string": "b"},
     {"file_path": "docs/pyproject.md", "old_string": "a", "new_string": "b"}),
    ("qwen-code", "write_file", {"file_path": "scripts\u2060/search.py", "content": "x"},
     {"file_path": "docs/scripts.md", "content": "x"}),
    ("codex", "apply_patch", {"input": _patch("*** Update File: docs/a.md", "*** Move to: PYPROJ~1.TOM", "@@", "+x")},
     {"input": _patch("*** Update File: docs/a.md", "*** Move to: docs/b.md", "@@", "+x")}),
    ("opencode", "read", {"filePath": ".e\u200bnv"}, {"filePath": "docs/env.md"}),
    ("claude-code", "Read", {"file_path": "ENVPRO~1.PRO"}, {"file_path": "docs/README.md"}),
]


def test_other_filesystems_names_refused_recorded_counted(upstream, proxy):
    for index, (client, tool, bad, good) in enumerate(CASES):
        _run(proxy, upstream, 400 + index, client, tool, bad, good)
    rows = proxy.rows("SELECT decision, primary_reason FROM tool_calls WHERE decision = 'reject'")
    assert [tuple(r) for r in rows] == [("reject", "protected_path")] * len(CASES)
    with proxy.client() as http:
        stats = http.get("/stats/models").json()["models"][0]
    assert stats["reasons"].get("protected_path") == len(CASES)
