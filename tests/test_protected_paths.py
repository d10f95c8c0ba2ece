"""Protected paths through the real proxy: the write that would change what an allowed command runs
(a script, `pyproject.toml`, `.git/config`, an agent's config, the served policy) is refused at the write,
on every file-writing shape the client profiles know, in every spelling; a secret read is refused; each
rejection is recorded with `protected_path` and counted in /stats/models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proxy.testing.scripted_upstream import Reply
from tests.conftest import ROOT, chat

CLIENTS = ROOT / "tests" / "policy" / "client_tools"


def _chat_tools(client: str) -> list[dict[str, Any]]:
    """A captured client catalogue as chat tools (Anthropic and Responses entries converted)."""
    out = []
    for tool in json.loads((CLIENTS / f"{client}.json").read_text())["tools"]:
        if "function" in tool:
            out.append(tool)
        elif "input_schema" in tool:
            out.append({"type": "function", "function": {"name": tool["name"], "parameters": tool["input_schema"]}})
        elif tool.get("type") == "function":
            out.append({"type": "function", "function": {"name": tool["name"], "parameters": tool["parameters"]}})
    if client == "codex":  # offered as a freeform tool to gpt models; the function form carries `input`
        out.append({"type": "function", "function": {"name": "apply_patch", "parameters": {
            "type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}}})
    return out


def _patch(*lines: str) -> str:
    return "\n".join(("*** Begin Patch", *lines, "*** End Patch"))


# (client, tool, refused arguments, allowed arguments)
WRITES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("opencode", "write", {"filePath": "scripts/search.py", "content": "import os"},
     {"filePath": "src/app/search_notes.py", "content": "x = 1"}),
    ("opencode", "edit", {"filePath": ".git/config", "oldString": "a", "newString": "b"},
     {"filePath": "src/app/main.py", "oldString": "a", "newString": "b"}),
    ("opencode", "write", {"filePath": "PyProject.TOML", "content": "[build-system]"},
     {"filePath": "notes.md", "content": "x"}),
    ("opencode", "write", {"filePath": "src/../.venv/lib/python3.11/site-packages/x.pth", "content": "import os"},
     {"filePath": "src/x.txt", "content": "x"}),
    ("opencode", "write", {"filePath": "ｓｃｒｉｐｔｓ/json.py", "content": "x"},
     {"filePath": "docs/json.md", "content": "x"}),
    ("opencode", "write", {"filePath": "scripts\\helper.py. ", "content": "x"},
     {"filePath": "lib/helper.py", "content": "x"}),
    ("opencode", "write", {"filePath": ".opencode/plugin/x.ts", "content": "x"},
     {"filePath": "app/x.ts", "content": "x"}),
    ("opencode", "apply_patch", {"patchText": _patch("*** Add File: lib/sitecustomize.py", "+import os")},
     {"patchText": _patch("*** Add File: lib/custom.py", "+x = 1")}),
    ("opencode", "apply_patch", {"patchText": _patch("\u2003*** Update File: .git/hooks/pre-commit", "@@", "+x")},
     {"patchText": _patch("*** Update File: src/app/a.py", "@@", "-a", "+b")}),
    ("claude-code", "Write", {"file_path": ".claude/settings.json", "content": "{}"},
     {"file_path": "src/settings.json", "content": "{}"}),
    ("claude-code", "Edit", {"file_path": "uv.lock", "old_string": "a", "new_string": "b"},
     {"file_path": "src/app/a.py", "old_string": "a", "new_string": "b"}),
    ("claude-code", "NotebookEdit", {"notebook_path": "scripts/analysis.ipynb", "new_source": "x"},
     {"notebook_path": "notebooks/analysis.ipynb", "new_source": "x"}),
    ("qwen-code", "write_file", {"file_path": ".python-version", "content": "3.9"},
     {"file_path": "version.txt", "content": "3.9"}),
    ("qwen-code", "edit", {"file_path": ".gitattributes", "old_string": "a", "new_string": "b"},
     {"file_path": "README.md", "old_string": "a", "new_string": "b"}),
    ("cline", "editor", {"command": "create", "path": ".clinerules/x.md", "file_text": "x"},
     {"command": "create", "path": "docs/rules.md", "file_text": "x"}),
    ("codex", "apply_patch", {"input": _patch("*** Update File: src/a.py", "*** Move to: scripts/a.py", "@@", "+x")},
     {"input": _patch("*** Update File: src/app/a.py", "*** Move to: src/app/b.py", "@@", "+x")}),
    ("codex", "apply_patch", {"input": _patch("*** Delete File: scripts/search.py")},
     {"input": _patch("*** Delete File: src/app/old.py")}),
    ("codex", "apply_patch", {"input": _patch("*** Update File: scripts/search.py", "@@", "+import os")},
     {"input": _patch("*** Update File: src/app/search.py", "@@", "+import os")}),
    ("codex", "exec_command", {"cmd": 'uv run scripts/search.py "x"', "workdir": ".git/hooks"},
     {"cmd": 'uv run scripts/search.py "x"', "workdir": "src"}),
    # A secret read: an allowed read of `.env` followed by an allowed fetch is the exfiltration path.
    ("opencode", "read", {"filePath": ".env"}, {"filePath": "pyproject.toml"}),
    ("claude-code", "Read", {"file_path": "deploy/.env.production"}, {"file_path": "deploy/README.md"}),
    ("opencode", "grep", {"pattern": "key", "path": ".aws/credentials"}, {"pattern": "key", "path": "src"}),
    # A filter glob that selects secrets: the grep prints their lines, the glob lists them.
    ("opencode", "grep", {"pattern": ".", "include": "{.env,x}"}, {"pattern": ".", "include": "*.py"}),
    ("opencode", "glob", {"pattern": "**/id_rsa*"}, {"pattern": "**/*.py"}),
    ("qwen-code", "grep_search", {"pattern": ".", "glob": "**/.env*"}, {"pattern": ".", "glob": "src/**/*.ts"}),
]
_AGENTS = {"opencode": "opencode/1.18.33", "claude-code": "claude-cli/2.1.197", "qwen-code": "QwenCode/0.15.10",
           "cline": "Cline/3.0.65", "codex": "codex_exec/0.171.0"}


def _run(proxy: Any, upstream: Any, index: int, client: str, tool: str, bad: dict[str, Any],
         good: dict[str, Any]) -> None:
    upstream.script(Reply(tool_calls=[(tool, bad)]), Reply(tool_calls=[(tool, good)]))
    body = chat([{"role": "user", "content": f"task {index}"}], tools=_chat_tools(client))
    with proxy.client() as http:
        response = http.post("/v1/chat/completions", json=body,
                             headers={"x-session-id": f"ses_p{index}", "user-agent": _AGENTS[client]})
    assert response.status_code == 200, response.text
    delivered = [json.loads(c["function"]["arguments"]) for c in response.json()["choices"][0]["message"]["tool_calls"]]
    assert delivered == [good], (client, tool, bad)
    feedback = upstream.requests[-1]["messages"][-1]["content"]
    assert "protected_path" in feedback and "protected" in feedback.split("protected_path", 1)[1], feedback


def test_protected_writes_and_reads_refused_recorded_counted(upstream, proxy):
    for index, (client, tool, bad, good) in enumerate(WRITES):
        _run(proxy, upstream, index, client, tool, bad, good)
    rows = proxy.rows("SELECT decision, primary_reason FROM tool_calls WHERE decision = 'reject'")
    assert [tuple(r) for r in rows] == [("reject", "protected_path")] * len(WRITES)
    with proxy.client() as http:
        stats = http.get("/stats/models").json()["models"][0]
    assert stats["reasons"].get("protected_path") == len(WRITES)
    assert stats["errors"] == len(WRITES)


def test_the_served_policy_is_protected(upstream, start_proxy, tmp_path: Path):
    project = tmp_path / "project"
    (project / "ops").mkdir(parents=True)
    policy = project / "ops" / "served.yaml"
    text = (ROOT / "policies" / "strict.yaml").read_text()
    assert "  project_root: []" in text
    policy.write_text(text.replace("  project_root: []", f"  project_root: [{project}]", 1))
    (project / "ops" / "link").symlink_to(project / "ops")
    proxy = start_proxy(upstream.url, policy=policy)
    cases = [{"filePath": "ops/served.yaml", "content": "name: x\n..."},
             {"filePath": str(policy), "content": "x"},
             {"filePath": "OPS/Served.yaml", "content": "x"},
             {"filePath": "ops/link/served.yaml", "content": "x"},
             {"filePath": "ops/new-policy.yaml", "content": "x"}]
    for index, bad in enumerate(cases):
        _run(proxy, upstream, 100 + index, "opencode", "write", bad, {"filePath": "docs/x.md", "content": "x"})


def test_a_symlink_out_of_the_project_is_refused(upstream, start_proxy, tmp_path: Path):
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    outside = tmp_path / "home"
    outside.mkdir()
    (project / "src" / "cfg").symlink_to(outside)
    (project / "hooks").symlink_to(project / ".git" / "hooks")
    text = (ROOT / "policies" / "strict.yaml").read_text()
    policy = tmp_path / "policy.yaml"
    policy.write_text(text.replace("  project_root: []", f"  project_root: [{project}]", 1))
    proxy = start_proxy(upstream.url, policy=policy)
    for index, bad in enumerate([{"filePath": "src/cfg/.bashrc", "content": "x"},
                                 {"filePath": f"{project}/src/cfg/.profile", "content": "x"},
                                 {"filePath": "hooks/pre-commit", "content": "x"}]):
        _run(proxy, upstream, 200 + index, "opencode", "write", bad, {"filePath": "src/x.md", "content": "x"})


def test_a_search_over_a_secret_on_disk_is_refused(upstream, start_proxy, tmp_path: Path):
    """A grep over `.` reads `certs/server.key` whatever its arguments name: refused where the project is on
    the proxy's machine, while the same search of `src/`, or with a filter leaving the key out, is delivered."""
    project = tmp_path / "project"
    for name in ["src/app.py", "certs/server.key"]:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("x")
    text = (ROOT / "policies" / "strict.yaml").read_text()
    policy = tmp_path / "policy.yaml"
    policy.write_text(text.replace("  project_root: []", f"  project_root: [{project}]", 1))
    proxy = start_proxy(upstream.url, policy=policy)
    cases = [({"pattern": "BEGIN", "path": "."}, {"pattern": "BEGIN", "path": "src"}),
             ({"pattern": "BEGIN"}, {"pattern": "BEGIN", "include": "*.py"})]
    for index, (bad, good) in enumerate(cases):
        _run(proxy, upstream, 300 + index, "opencode", "grep", bad, good)
    rows = proxy.rows("SELECT primary_reason FROM tool_calls WHERE decision = 'reject'")
    assert [r[0] for r in rows] == ["protected_path"] * len(cases)
