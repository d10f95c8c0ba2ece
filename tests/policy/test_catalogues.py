"""Every captured client catalogue (tests/policy/client_tools/*.json) classified: each shell, file, URL and
patch tool governed with the capability expected, and no harmless tool (todo lists, questions, plans)
refused for a plain call. `python -m tests.policy.test_catalogues` prints the table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.policy import Policy, judge_call, load_policy_file
from proxy.policy.schema import ToolMap
from proxy.policy.tools.profiles import ToolSet, offered_tools

from .conftest import ROOT

CLIENTS = Path(__file__).parent / "client_tools"

# The tools of each catalogue that can run a command, open a file or directory, fetch a URL or apply a
# patch, and the capability that governs each. Every other tool is harmless.
EXPECTED: dict[str, dict[str, str]] = {
    "opencode": {"bash": "shell", "read": "paths", "edit": "paths", "write": "paths", "glob": "paths",
                 "grep": "paths", "apply_patch": "patch", "webfetch": "urls"},
    "qwen-code": {"run_shell_command": "shell", "monitor": "shell", "read_file": "paths", "write_file": "paths",
                  "edit": "paths", "list_directory": "paths", "glob": "paths", "grep_search": "paths",
                  "web_fetch": "urls"},
    "claude-code": {"Bash": "shell", "Workflow": "shell", "Read": "paths", "Write": "paths", "Edit": "paths",
                    "NotebookEdit": "paths", "EnterWorktree": "paths", "WebFetch": "urls",
                    "ReportFindings": "paths"},
    "codex": {"exec_command": "shell", "view_image": "paths", "send_input": "paths", "spawn_agent": "paths"},
    "cline": {"run_commands": "shell", "read_files": "paths", "editor": "paths", "fetch_web_content": "urls"},
    "continue": {"Bash": "shell", "Read": "paths", "Write": "paths", "Edit": "paths", "MultiEdit": "paths",
                 "List": "paths", "Search": "paths", "Diff": "paths", "UploadArtifact": "paths", "Fetch": "urls"},
    "smolagents": {"python_interpreter": "shell", "visit_webpage": "urls"},
    "pydantic-ai": {"web_fetch": "urls", "read_file": "paths", "run_command": "shell"},
    "openai-agents": {"read_file": "paths", "shell_call": "shell", "apply_patch_call": "paths",
                      "local_shell_call": "shell", "computer_call": "keyboard"},
    "langchain": {"terminal": "shell", "copy_file": "paths", "file_delete": "paths", "file_search": "paths",
                  "move_file": "paths", "read_file": "paths", "write_file": "paths", "list_directory": "paths",
                  "requests_get": "urls"},
    "mini-swe-agent": {"bash": "shell"},
    "vercel-ai-sdk": {"bash": "shell", "readFile": "paths", "writeFile": "paths", "fetchUrl": "urls"},
    "kilo": {"bash": "shell", "background_process": "shell", "read": "paths", "edit": "paths", "write": "paths",
             "glob": "paths", "grep": "paths", "webfetch": "urls", "link_pr": "urls"},
    # strands-agents-tools' `shell` takes objects of any keys in its command list: read per call by its arguments
    "strands": {"shell": "per-call", "file_read": "paths", "editor": "paths"},
    "agno": {"run_shell_command": "shell", "read_file": "paths", "read_file_chunk": "paths",
             "replace_file_chunk": "paths", "save_file": "paths", "list_files": "paths", "search_content": "paths"},
    "autogen": {"run_shell": "shell", "read_text": "paths"},
    "open-interpreter": {"execute": "shell"},
}  # fmt: skip
_CAPABILITY = {"shell": lambda m: m.shell is not None,
               "paths": lambda m: bool(m.paths) or bool(m.read_paths) or bool(m.searches),
               "urls": lambda m: bool(m.urls), "patch": lambda m: bool(m.patch),
               "keyboard": lambda m: m.keyboard is not None}


def _catalogue(name: str) -> dict[str, Any]:
    return json.loads((CLIENTS / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def shipped() -> Policy:
    return load_policy_file(ROOT / "policies" / "strict.yaml").policy


def _toolset(policy: Policy, name: str) -> ToolSet:
    data = _catalogue(name)
    headers = {"user-agent": data["user_agent"]} if data.get("user_agent") else {}
    return ToolSet.for_request(policy, {"tools": data["tools"]}, headers)


def _maps(tools: ToolSet, tool: str) -> list[ToolMap]:
    return [rule.map for rule in tools._rules.get(tool, []) if rule.governed]


def _plain_value(schema: Any, depth: int = 0) -> Any:
    """A benign value of a schema: what a harmless call sends."""
    if not isinstance(schema, dict) or depth > 6:
        return "x"
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return _plain_value(next((b for b in schema[key] if b.get("type") != "null"), {}), depth + 1)
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object" or "properties" in schema:
        return {k: _plain_value(v, depth + 1) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [_plain_value(schema.get("items", {}), depth + 1)]
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return False
    return "notes about the plan"


def classify_catalogue(policy: Policy, name: str) -> dict[str, Any]:
    tools = _toolset(policy, name)
    offered = offered_tools({"tools": _catalogue(name)["tools"]})
    governed = {tool for tool in offered if _maps(tools, tool)}
    refused = []
    for tool, spec in offered.items():
        if tool in EXPECTED[name]:
            continue
        arguments = _plain_value(spec.schema) if spec.schema is not None else {}
        verdict = judge_call(policy, tool, arguments if isinstance(arguments, dict) else {},
                             offered_tools=set(offered), tools=tools)
        if not verdict.allowed:
            refused.append((tool, verdict.reasons))
    return {"tools": len(offered), "governed": governed, "refused": refused, "toolset": tools,
            "profiles": tools.profiles}


CATALOGUES = sorted(p.stem for p in CLIENTS.glob("*.json"))


def test_every_catalogue_has_expectations() -> None:
    assert set(CATALOGUES) == set(EXPECTED)
    assert len(CATALOGUES) >= 13


@pytest.mark.parametrize("name", CATALOGUES)
def test_catalogue_classified(shipped: Policy, name: str) -> None:
    found = classify_catalogue(shipped, name)
    tools = found["toolset"]
    for tool, capability in EXPECTED[name].items():
        if capability == "per-call":  # a schema that cannot be read: each call is judged by its own arguments
            assert any(not rule.readable for rule in tools._rules.get(tool, [])), (name, tool)
            continue
        maps = _maps(tools, tool)
        assert any(_CAPABILITY[capability](m) for m in maps), (name, tool, capability, maps)
    # Harmless tools are not governed by a capability they do not have, and a plain call passes.
    assert found["governed"] <= set(EXPECTED[name]) | _path_like_harmless(name), (
        name, found["governed"] - set(EXPECTED[name]))
    assert found["refused"] == [], (name, found["refused"])


def _path_like_harmless(name: str) -> set[str]:
    """Tools that take an argument named like a path without reading files (Claude Code's Skill `args`
    is not one): governed by the path rules, which only refuse places outside the project."""
    return set()


def table(policy: Policy) -> list[tuple[str, int, int, int]]:
    rows = []
    for name in CATALOGUES:
        found = classify_catalogue(policy, name)
        rows.append((name, found["tools"], len(found["governed"]), len(found["refused"])))
    return rows


if __name__ == "__main__":
    policy = load_policy_file(ROOT / "policies" / "strict.yaml").policy
    print("| client | tools | governed | wrongly refused |\n| --- | --- | --- | --- |")
    for row in table(policy):
        print("| " + " | ".join(str(c) for c in row) + " |")
