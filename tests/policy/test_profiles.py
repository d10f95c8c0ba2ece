"""Tool profiles against the tools the real clients offer (tests/policy/client_tools/*.json, captured from
Qwen Code 0.15.10, Codex 0.171.0, Claude Code 2.1.197 and Cline 3.0.65; OpenCode's from docs/peers.md).

Each client's request picks its own profile; its shell tool is judged by the shell rules, its file tools
by the path rules; an absolute path passes only under the project root."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.policy import Policy, judge_call, load_policy_file
from proxy.policy.tools.profiles import ToolSet, builtin_profiles, offered_tools, shell_like

from .conftest import ROOT

CLIENTS = Path(__file__).parent / "client_tools"
ROOT_DIR = "/home/dev/project"
PIPE = "uv run scripts/search.py x | head -5"
ALLOWED = "uv run scripts/search.py x"


def _client(name: str) -> dict[str, Any]:
    return json.loads((CLIENTS / f"{name}.json").read_text())


def _payload(name: str) -> dict[str, Any]:
    return {"model": "m", "tools": _client(name)["tools"]}


@pytest.fixture(scope="module")
def shipped() -> Policy:
    return load_policy_file(ROOT / "policies" / "strict.yaml").policy


@pytest.fixture(scope="module")
def rooted(shipped: Policy) -> Policy:
    return shipped.model_copy(update={"paths": shipped.paths.model_copy(update={"project_root": [ROOT_DIR]})})


def _tools(policy: Policy, client: str, *, user_agent: bool = True) -> ToolSet:
    headers = {"user-agent": _client(client)["user_agent"]} if user_agent else {}
    return ToolSet.for_request(policy, _payload(client), headers)


# What each client's tools amount to: (profile, shell tools, path tools); every other tool is `other_tools`.
EXPECTED = {
    "opencode": ("opencode", {"bash"}, {"read", "edit", "write", "glob", "grep", "apply_patch"}),
    "qwen-code": ("qwen-code", {"run_shell_command", "monitor"},
                  {"read_file", "write_file", "edit", "list_directory", "glob", "grep_search"}),
    "claude-code": ("claude-code", {"Bash", "Workflow"},
                    {"Read", "Write", "Edit", "NotebookEdit", "EnterWorktree", "Workflow", "ReportFindings"}),
    "codex": ("codex", {"exec_command"}, {"view_image", "send_input", "spawn_agent"}),
    "cline": ("cline", {"run_commands"}, {"read_files", "editor"}),
}


@pytest.mark.parametrize("client", sorted(EXPECTED))
def test_each_client_picks_its_profile_and_its_capabilities(shipped: Policy, client: str) -> None:
    profile, shells, files = EXPECTED[client]
    for with_agent in (True, False):  # the tools alone decide; the User-Agent only breaks ties
        tools = _tools(shipped, client, user_agent=with_agent)
        assert tools.profiles == [profile]
    governed_shell = {t for t, rules in tools._rules.items() if any(r.map.shell for r in rules)}
    governed_paths = {t for t, rules in tools._rules.items()
                      if any(r.map.paths or r.map.read_paths or r.map.searches or r.map.patch for r in rules)}
    assert governed_shell == shells
    assert governed_paths == files
    # Every tool the client offers is known to its profile: nothing falls to the heuristic unnoticed.
    known = set(builtin_profiles()[profile].tools) | {"bash", "read", "edit", "write", "glob", "grep"}
    assert set(offered_tools(_payload(client))) <= known


SHELL_CALLS = {
    "opencode": ("bash", lambda c: {"command": c, "description": "d"}),
    "qwen-code": ("run_shell_command", lambda c: {"command": c, "is_background": False}),
    "claude-code": ("Bash", lambda c: {"command": c, "description": "d"}),
    "codex": ("exec_command", lambda c: {"cmd": c, "login": True, "yield_time_ms": 1000}),
    "cline": ("run_commands", lambda c: {"commands": [c]}),
}
READ_CALLS = {
    "opencode": ("read", lambda p: {"filePath": p}),
    "qwen-code": ("read_file", lambda p: {"file_path": p}),
    "claude-code": ("Read", lambda p: {"file_path": p}),
    "codex": ("view_image", lambda p: {"path": p}),
    "cline": ("read_files", lambda p: {"files": [{"path": p, "start_line": None}]}),
}


@pytest.mark.parametrize("client", sorted(SHELL_CALLS))
def test_shell_tools_are_judged_by_the_shell_rules(rooted: Policy, client: str) -> None:
    tools = _tools(rooted, client)
    offered = set(tools.offered or {})
    name, arguments = SHELL_CALLS[client]
    piped = judge_call(rooted, name, arguments(PIPE), offered_tools=offered, tools=tools)
    assert (piped.decision, piped.reasons, piped.shape) == ("reject", ("pipe",), "pipe")
    assert judge_call(rooted, name, arguments(ALLOWED), offered_tools=offered, tools=tools).allowed
    assert judge_call(rooted, name, arguments("cat /etc/passwd"), offered_tools=offered, tools=tools).reasons == (
        "program",)


@pytest.mark.parametrize("client", sorted(READ_CALLS))
def test_file_tools_pass_only_inside_the_project(shipped: Policy, rooted: Policy, client: str) -> None:
    name, arguments = READ_CALLS[client]
    tools = _tools(rooted, client)
    offered = set(tools.offered or {})

    def verdict(path: str, policy: Policy = rooted, toolset: ToolSet = tools) -> tuple[str, ...]:
        return judge_call(policy, name, arguments(path), offered_tools=offered, tools=toolset).reasons

    assert verdict(f"{ROOT_DIR}/notes.txt") == ()
    assert verdict(f"{ROOT_DIR}/./docs/../notes.txt") == ()
    assert verdict("notes.txt") == ()
    assert verdict("/etc/passwd") == ("absolute_path",)
    assert verdict(f"{ROOT_DIR}/../other/secret") == ("path_escape",)
    assert verdict(f"{ROOT_DIR}-evil/x") == ("absolute_path",)
    assert verdict("../secret") == ("path_escape",)
    # Without a project root every absolute path is refused, as before.
    assert verdict(f"{ROOT_DIR}/notes.txt", shipped, _tools(shipped, client)) == ("absolute_path",)


def test_workdir_arguments_are_paths(rooted: Policy) -> None:
    tools = _tools(rooted, "codex")
    call = {"cmd": ALLOWED, "workdir": ROOT_DIR}
    assert judge_call(rooted, "exec_command", call, tools=tools).allowed
    call = {"cmd": ALLOWED, "workdir": "/tmp"}
    verdict = judge_call(rooted, "exec_command", call, tools=tools)
    assert (verdict.reasons, verdict.shape) == (("absolute_path",), "absolute_path:exec_command.workdir")
    tools = _tools(rooted, "qwen-code")
    assert judge_call(rooted, "run_shell_command", {"command": PIPE, "directory": "/tmp"}, tools=tools).reasons == (
        "pipe", "absolute_path")


def test_codex_shell_argument_must_be_a_shell(rooted: Policy) -> None:
    tools = _tools(rooted, "codex")
    for shell in ("/bin/bash", "zsh", "sh"):
        assert judge_call(rooted, "exec_command", {"cmd": ALLOWED, "shell": shell, "login": True}, tools=tools).allowed
    verdict = judge_call(rooted, "exec_command", {"cmd": ALLOWED, "shell": "/usr/bin/curl"}, tools=tools)
    assert (verdict.reasons, verdict.shape) == (("wrapper",), "wrapper:exec_command.shell")
    assert judge_call(rooted, "exec_command", {"cmd": ALLOWED, "shell": 3}, tools=tools).decision == "malformed"
    # A program named like a shell at a path of the project's (or the model's) is no shell (issue 38).
    for shell in ("scripts/x/bash", "./tools/bash", "/tmp/bash", "bin/zsh", "/home/u/bash", "bash ", "BASH"):
        verdict = judge_call(rooted, "exec_command", {"cmd": ALLOWED, "shell": shell}, tools=tools)
        assert verdict.reasons == ("wrapper",), shell


@pytest.mark.parametrize("program", ["scripts/x/bash", "./tools/bash", "tools/sh", "/tmp/zsh", "../bash"])
def test_an_argv_program_named_like_a_shell_is_not_unwrapped(rooted: Policy, program: str) -> None:
    verdict = judge_call(rooted, "local_shell_call", {"type": "exec", "command": [program, "-lc", ALLOWED]})
    assert not verdict.allowed, program
    for shell in ("bash", "/bin/bash", "/usr/bin/bash", "sh", "/bin/sh", "zsh", "/usr/local/bin/zsh"):
        assert judge_call(rooted, "local_shell_call", {"type": "exec", "command": [shell, "-lc", ALLOWED]}).allowed


def test_project_root_from_a_header(shipped: Policy) -> None:
    headers = {"user-agent": "QwenCode/0.15.10", "X-Project-Root": "/srv/projects/app/"}
    tools = ToolSet.for_request(shipped, _payload("qwen-code"), headers, root_header="x-project-root")
    assert tools.roots == ("/srv/projects/app",)
    assert judge_call(shipped, "read_file", {"file_path": "/srv/projects/app/a.py"}, tools=tools).allowed
    assert not judge_call(shipped, "read_file", {"file_path": "/srv/projects/other"}, tools=tools).allowed
    # A header naming `/` or a relative directory names no root.
    for bad in ("/", "relative/dir", "/../"):
        headers = {"x-project-root": bad}
        tools = ToolSet.for_request(shipped, _payload("qwen-code"), headers, root_header="x-project-root")
        assert tools.roots == ()


RESPONSES_TOOLS = [{"type": "local_shell"}, {"type": "shell"}, {"type": "apply_patch"},
                   {"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "grammar"}}]


@pytest.mark.parametrize(("tool", "arguments", "reasons"), [
    ("local_shell_call", {"type": "exec", "command": ["bash", "-lc", PIPE], "working_directory": ROOT_DIR}, ("pipe",)),
    ("local_shell_call", {"type": "exec", "command": ["bash", "-lc", ALLOWED], "working_directory": ROOT_DIR}, ()),
    ("local_shell_call", {"type": "exec", "command": ["uv", "run", "scripts/search.py", "a | b"]}, ()),
    ("local_shell_call", {"type": "exec", "command": ["sh", "-c", ALLOWED, "extra"]}, ("wrapper",)),
    ("local_shell_call", {"type": "exec", "command": ["bash", "-l", "-c", ALLOWED], "env": {"X": "1"}},
     ("assignment",)),
    ("local_shell_call", {"type": "exec", "command": ["bash", "-lc", ALLOWED], "working_directory": "/"},
     ("absolute_path",)),
    ("shell_call", {"commands": [ALLOWED, "uv run scripts/summarize.py"]}, ()),
    ("shell_call", {"commands": [ALLOWED, "cat /etc/shadow"]}, ("program",)),
    ("apply_patch_call", {"type": "update_file", "path": "src/app/a.py", "diff": "@@\n-a\n+b\n"}, ()),
    ("apply_patch_call", {"type": "create_file", "path": "/etc/cron.d/x", "diff": "+x\n"}, ("absolute_path",)),
    ("apply_patch", {"input": "*** Begin Patch\n*** Update File: src/app/a.py\n@@\n-a\n+b\n*** End Patch\n"},
     ()),
    ("apply_patch", {"input": "*** Begin Patch\n*** Update File: app/a.py\n*** Move to: ../../x.py\n*** End Patch"},
     ("path_escape",)),
    ("apply_patch", {"input": "*** Begin Patch\n*** Delete File: /etc/passwd\n*** End Patch"}, ("absolute_path",)),
])  # fmt: skip
def test_responses_action_items(rooted: Policy, tool: str, arguments: dict[str, Any], reasons: tuple[str, ...]) -> None:
    tools = ToolSet.for_request(rooted, {"tools": RESPONSES_TOOLS}, {"user-agent": "codex_exec/0.171.0"})
    assert set(tools.offered or {}) == {"local_shell_call", "shell_call", "apply_patch_call", "apply_patch"}
    assert judge_call(rooted, tool, arguments, offered_tools=set(tools.offered or {}), tools=tools).reasons == reasons


def test_cline_tools(rooted: Policy) -> None:
    """Cline 3.0: `run_commands {commands: [...]}` runs each command; `read_files {files: [{path}]}`."""
    assert judge_call(rooted, "run_commands", {"commands": [ALLOWED]}).allowed
    assert judge_call(rooted, "run_commands", {"commands": [ALLOWED, PIPE]}).reasons == ("pipe",)
    assert judge_call(rooted, "run_commands", {"commands": "not a list"}).reasons == ("program",)
    assert judge_call(rooted, "run_commands", {"commands": [{"x": 1}]}).decision == "malformed"
    files = {"files": [{"path": "README.md"}, {"path": f"{ROOT_DIR}/a"}, {"path": "/etc/passwd"}]}
    verdict = judge_call(rooted, "read_files", files)
    assert (verdict.reasons, verdict.shape) == (("absolute_path",), "absolute_path:read_files.files[2].path")
    assert judge_call(rooted, "read_files", {"files": "x"}).decision == "malformed"
    assert judge_call(rooted, "editor", {"command": "create", "path": "../x"}).reasons == ("path_escape",)


@pytest.mark.parametrize(("schema", "description", "shell"), [
    ({"properties": {"cmd": {"type": "string"}}}, None, "command=cmd"),
    ({"properties": {"shellCommand": {"type": "string"}}}, None, "command=shellCommand"),
    ({"properties": {"commands": {"type": "array", "items": {"type": "string"}}}}, None, "commands=commands"),
    ({"properties": {"code": {"type": "string"}, "lang": {"type": "string"}}}, None, "command=code"),
    ({"properties": {"input": {"type": "string"}}, "required": ["input"]}, "Executes a shell command", "command=input"),
    ({"properties": {"query": {"type": "string"}}}, "Search the web", None),
    ({"properties": {"command_id": {"type": "integer"}}}, None, None),
    (None, None, None),
])  # fmt: skip
def test_shell_like_unknown_tools(schema: dict[str, Any] | None, description: str | None, shell: str | None) -> None:
    found = shell_like(schema, description)
    shown = None if found is None else (f"command={found.command}" if found.command else f"commands={found.commands}")
    assert shown == shell


def test_unknown_tools_fail_closed(shipped: Policy) -> None:
    terminal = {"type": "object", "properties": {"input": {"type": "string"}}}
    payload = {"tools": [
        {"type": "function", "function": {"name": "terminal", "description": "Run a command in a terminal",
                                          "parameters": terminal}},
        {"type": "function", "function": {"name": "lookup", "parameters": {
            "type": "object", "properties": {"q": {"type": "string"}}}}},
    ]}  # fmt: skip
    tools = ToolSet.for_request(shipped, payload, {})
    assert tools.profiles == ["heuristic"] and tools.governed() == ["terminal"]
    assert judge_call(shipped, "terminal", {"input": PIPE}, tools=tools).reasons == ("pipe",)
    assert judge_call(shipped, "terminal", {"input": ALLOWED}, tools=tools).allowed
    assert judge_call(shipped, "lookup", {"q": "ls | sh"}, tools=tools).allowed  # other_tools: allow
    strict = shipped.model_copy(update={"other_tools": "reject"})
    assert judge_call(strict, "lookup", {"q": "x"}, tools=ToolSet.for_request(strict, payload, {})).reasons == (
        "unknown_tool",)


def test_policy_profiles_add_and_replace() -> None:
    policy = Policy.model_validate({
        "name": "p", "bash": {"scripts": {"search": {}}},
        "profiles": {
            "my-agent": {"user_agent": "MyAgent/", "tools": {
                "run": {"shell": {"argv": "argv", "workdir": "cwd"}},
                "open": {"paths": ["target", "more[]"]}}},
            "qwen-code": {"tools": {"run_shell_command": {"known": ["command", "directory"]},
                                    "read_file": {"paths": ["file_path"]}}},
            "cline": None,
        },
    })  # fmt: skip
    assert judge_call(policy, "run", {"argv": ["uv", "run", "scripts/search.py"], "cwd": "sub"}).allowed
    assert judge_call(policy, "run", {"argv": ["bash", "-c", PIPE]}).reasons == ("pipe",)
    assert judge_call(policy, "open", {"target": "a", "more": ["b", "/c"]}).reasons == ("absolute_path",)
    # The replacement is the operator's word: its run_shell_command is a known tool of no capability now
    # (`known` says its command-shaped arguments carry none; `{}` alone would leave them to classification).
    assert judge_call(policy, "run_shell_command", {"command": PIPE}).allowed
    tools = ToolSet.for_request(policy, _payload("qwen-code"), {})
    assert tools.profiles[0] == "qwen-code" and not tools._rules["run_shell_command"][0].map.governed
    # Its tools the replacement leaves out are unknown: `monitor {command}` looks like a shell.
    assert judge_call(policy, "monitor", {"command": PIPE}, tools=tools).reasons == ("pipe",)
    # The removed profile maps nothing: Cline's read_files is unknown, and its arguments say it reads files.
    assert judge_call(policy, "read_files", {"files": [{"path": "/etc/passwd"}]}).reasons == ("absolute_path",)
    assert judge_call(policy, "read_files", {"files": [{"path": "README.md"}]}).allowed


def test_several_profiles_apply_to_mixed_tools(shipped: Policy) -> None:
    tools = {"tools": [*_client("claude-code")["tools"][:3], *_client("qwen-code")["tools"]]}
    toolset = ToolSet.for_request(shipped, tools, {"user-agent": "my-sdk/1.0"})
    assert sorted(toolset.profiles) == ["claude-code", "qwen-code"]
    assert judge_call(shipped, "Bash", {"command": PIPE}, tools=toolset).reasons == ("pipe",)
    assert judge_call(shipped, "run_shell_command", {"command": PIPE}, tools=toolset).reasons == ("pipe",)


def test_one_name_two_clients_both_maps_apply(shipped: Policy) -> None:
    """`edit` is OpenCode's (filePath) and Qwen Code's (file_path): the offered schema says which."""
    qwen = _tools(shipped, "qwen-code")
    assert [r.profile for r in qwen._rules["edit"]] == ["qwen-code"]
    assert judge_call(shipped, "edit", {"file_path": "/etc/x", "old_string": "", "new_string": ""},
                      tools=qwen).reasons == ("absolute_path",)
    # Nothing known about the request (a CLI check): every map that fits the arguments applies.
    assert judge_call(shipped, "edit", {"file_path": "/etc/x"}).reasons == ("absolute_path",)
    assert judge_call(shipped, "edit", {"filePath": "/etc/x"}).reasons == ("absolute_path",)


def test_user_agent_breaks_ties() -> None:
    """Two profiles that know the same tools: the User-Agent picks the one recorded."""
    profile = {"tools": {"run": {"shell": {"command": "command"}}}}
    policy = Policy.model_validate({"name": "p", "profiles": {"a": {**profile, "user_agent": "AgentA"},
                                                              "b": {**profile, "user_agent": "AgentB"}}})
    payload = {"tools": [{"type": "function", "function": {"name": "run", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}}}}]}
    assert ToolSet.for_request(policy, payload, {"user-agent": "AgentB/2"}).profiles == ["b"]
    assert ToolSet.for_request(policy, payload, {"user-agent": "AgentA/2"}).profiles == ["a"]
    assert ToolSet.for_request(policy, payload, {}).profiles == ["a"]


def test_profile_schema_errors_name_the_key(tmp_path: Path) -> None:
    from proxy.policy import PolicyError

    path = tmp_path / "p.yaml"
    path.write_text("name: p\nprofiles:\n  x:\n    tools:\n      run: {shell: {command: a, argv: b}}\n")
    with pytest.raises(PolicyError) as info:
        load_policy_file(path)
    assert info.value.line == 5 and info.value.key == "profiles.x.tools.run.shell"
    assert "exactly one of command, commands, argv" in info.value.message
    path.write_text("name: p\npaths:\n  project_root: [relative/dir]\n")
    with pytest.raises(PolicyError) as info:
        load_policy_file(path)
    assert info.value.key == "paths.project_root" and "absolute directory" in info.value.message
    path.write_text("name: p\nshell: {}\nbash: {}\n")
    with pytest.raises(PolicyError) as info:
        load_policy_file(path)
    assert "not both" in info.value.message
