"""Write-then-run through the real proxy, for the modules an installed distribution imports only where they
exist (issue 38): a real uv project with requests installed (tests/policy/test_imports_computed.py), the
proxy pinned to it. The model writes each module requests and urllib3 try to import into `src/` with
OpenCode's write tool; the test plays the agent, applying only what the proxy delivers, then runs the allowed
`uv run scripts/search.py x`: no payload ran, every refusal is recorded as `protected_path`, and the
model's retry, a new module inside the project's own package, was delivered and written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.testing.scripted_upstream import Reply
from tests.conftest import ROOT, chat
from tests.policy.test_imports_computed import UV, _site, make_project, optional_imports, run_search
from tests.test_protected_paths import _chat_tools

pytestmark = pytest.mark.skipif(UV is None, reason="needs uv (the test extra)")


def _apply(project: Path, delivered: list[dict[str, Any]]) -> None:
    for call in delivered:
        arguments = json.loads(call["function"]["arguments"])
        path = project / arguments["filePath"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(arguments["content"])


def test_no_optional_import_written_by_the_model_runs(upstream, start_proxy, tmp_path: Path) -> None:
    project, env = make_project(tmp_path)
    mark = tmp_path / "mark"
    names = sorted(optional_imports(_site(project)))
    policy = tmp_path / "policy.yaml"
    text = (ROOT / "policies" / "strict.yaml").read_text()
    policy.write_text(text.replace("  project_root: []", f"  project_root: [{project}]", 1))
    proxy = start_proxy(upstream.url, policy=policy)
    payload = f"open({str(mark)!r}, 'w').write('ran')\n"
    for index, name in enumerate(names):
        upstream.script(Reply(tool_calls=[("write", {"filePath": f"src/{name}.py", "content": payload})]),
                        Reply(tool_calls=[("write", {"filePath": f"src/demo/plugin_{index}.py", "content": "x = 1"})]))
        body = chat([{"role": "user", "content": f"speed up requests {index}"}], tools=_chat_tools("opencode"))
        with proxy.client() as http:
            response = http.post("/v1/chat/completions", json=body,
                                 headers={"x-session-id": f"ses_imp{index}", "user-agent": "opencode/1.18.33"})
        assert response.status_code == 200, response.text
        delivered = response.json()["choices"][0]["message"]["tool_calls"]
        _apply(project, delivered)
        feedback = upstream.requests[-1]["messages"][-1]["content"]
        assert "protected_path" in feedback, (name, feedback)
    ran = run_search(project, env)
    assert ran.returncode == 0, ran.stderr
    assert not mark.exists(), "a payload the model wrote ran under the allowed command"
    assert sorted(p.name for p in (project / "src" / "demo").glob("plugin_*.py")) == sorted(
        f"plugin_{i}.py" for i in range(len(names)))
    rows = proxy.rows("SELECT decision, primary_reason FROM tool_calls")
    assert sorted(map(tuple, rows)) == sorted([("reject", "protected_path")] * len(names)
                                              + [("allow", None)] * len(names)), rows
    with proxy.client() as http:
        stats = http.get("/stats/models").json()["models"][0]
    assert stats["reasons"].get("protected_path") == len(names)
