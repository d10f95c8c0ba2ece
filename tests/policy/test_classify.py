"""Schema classification of tools no profile knows, URL rules and script argument rules, unit by unit."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.policy import Policy, PolicyError, judge_call, judge_command, load_policy_text
from proxy.policy.schema import UrlRules
from proxy.policy.tools.classify import classify
from proxy.policy.tools.profiles import ToolSet
from proxy.policy.urls.rules import url_problem

ROOT_DIR = "/home/dev/project"
ALLOWED = "uv run scripts/search.py x"
S = {"type": "string"}


def _obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


def _found(schema: Any, description: str | None = None) -> tuple[bool, list[str]]:
    result = classify(schema, description)
    out: list[str] = []
    for m in result.maps:
        if m.shell is not None:
            out.append(f"shell:{m.shell.source}" + (f"@{m.shell.workdir}" if m.shell.workdir else ""))
        out += [f"path:{p}" for p in [*m.paths, *m.read_paths]]
        out += [f"url:{u}" for u in m.urls] + [f"patch:{p}" for p in m.patch]
    return result.readable, out


@pytest.mark.parametrize(("schema", "description", "readable", "found"), [
    (_obj(filepath=S), None, True, ["path:filepath"]),
    (_obj(command=S, workdir=S), None, True, ["shell:command@workdir"]),
    (_obj(commands={"anyOf": [S, {"type": "array", "items": S}]}), None, True, ["shell:commands"]),
    (_obj(params=_obj(cmd=S)), None, True, ["shell:params.cmd"]),
    (_obj(files={"type": "array", "items": _obj(path=S)}), None, True, ["path:files[].path"]),
    (_obj(path=S, encoding={"anyOf": [S, {"type": "null"}]}), None, True, ["path:path"]),
    (_obj(cwd={"anyOf": [S, {"type": "null"}]}, command=S), None, True, ["shell:command@cwd"]),
    (_obj(target={"type": "string", "format": "uri"}), None, True, ["url:target"]),
    (_obj(where={"type": "string", "description": "Absolute path to the notebook"}), None, True, ["path:where"]),
    (_obj(input=S), "Executes a shell command", True, ["shell:input"]),
    (_obj(patchText=S), None, True, ["patch:patchText"]),
    (_obj(url=S, prompt=S), None, True, ["url:url"]),
    (_obj(todos={"type": "array", "items": _obj(content=S, status={"enum": ["a", "b"]})}), None, True, []),
    (_obj(question=S, options={"type": "array", "items": S}), None, True, []),
    (_obj(profile=S), None, True, []),
    ({"$ref": "#/$defs/A", "$defs": {"A": _obj(x=S)}}, None, False, []),
    (_obj(x={"$ref": "#/$defs/A"}) | {"$defs": {"A": _obj(file_path=S)}}, None, True, ["path:x.file_path"]),
    ({"anyOf": [_obj(a=S), _obj(b=S)]}, None, False, []),
    ({"type": "object"}, None, False, []),
    ({}, None, False, []),
    (None, None, False, []),
    (_obj(a=S) | {"additionalProperties": True}, None, False, []),
    (_obj(a=S) | {"additionalProperties": False}, None, True, []),
])  # fmt: skip
def test_classify(schema: Any, description: str | None, readable: bool, found: list[str]) -> None:
    assert _found(schema, description) == (readable, found)


def _policy(**extra: Any) -> Policy:
    base: dict[str, Any] = {"name": "p", "bash": {"scripts": {"search": {"flags": ["--max-results"]},
                                                              "fetch_page": {}}},
                            "paths": {"project_root": [ROOT_DIR]}}
    base.update(extra)
    return Policy.model_validate(base)


def _call(policy: Policy, tools: list[dict[str, Any]], name: str, arguments: dict[str, Any]) -> tuple[str, ...]:
    toolset = ToolSet.for_request(policy, {"tools": tools}, {})
    return judge_call(policy, name, arguments, offered_tools=set(toolset.offered or {}), tools=toolset).reasons


def _tool(name: str, parameters: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


@pytest.mark.parametrize(("arguments", "reasons"), [
    ({"x": "/etc/passwd"}, ("absolute_path",)),
    ({"x": f"{ROOT_DIR}/a.txt"}, ()),
    ({"x": "~/.ssh/id_rsa"}, ("path_escape",)),
    ({"x": "../../etc"}, ("path_escape",)),
    ({"x": "file:///etc/passwd"}, ("absolute_path",)),
    ({"x": "FILE:/etc/passwd"}, ("absolute_path",)),
    ({"x": "read /etc/passwd please"}, ()),  # free text that mentions a path
    ({"x": "line one\n/etc/passwd"}, ()),
    ({"x": {"deep": ["ok", "/root/.netrc"]}}, ("absolute_path",)),
    ({"x": "http://127.0.0.1:8080/"}, ("url",)),
    ({"x": "https://example.com/docs"}, ()),
    ({"command": "ls -la"}, ("program",)),
    ({"cmd": ALLOWED, "cwd": "/tmp"}, ("absolute_path",)),
    ({"note": "C:\\Windows\\system32"}, ("absolute_path",)),
    ({"note": "Q: what now?"}, ()),
])  # fmt: skip
@pytest.mark.parametrize("schema", [{}, {"type": "object"}, {"anyOf": [{"type": "object"}]}, {"$ref": "#/x"}])
def test_unreadable_schemas_are_governed_by_content(schema: Any, arguments: dict[str, Any],
                                                    reasons: tuple[str, ...]) -> None:
    assert _call(_policy(), [_tool("mystery", schema)], "mystery", arguments) == reasons


def test_readable_harmless_tool_still_refuses_whole_value_paths() -> None:
    tools = [_tool("note", _obj(text=S))]
    assert _call(_policy(), tools, "note", {"text": "remember the milk"}) == ()
    assert _call(_policy(), tools, "note", {"text": "/etc/shadow"}) == ("absolute_path",)
    strict = _policy(other_tools="reject")
    assert _call(strict, tools, "note", {"text": "x"}) == ("unknown_tool",)


def test_known_name_other_arguments_is_classified() -> None:
    """Claude Code's `Read {file_path}` offered as `Read {filepath}` (Continue): governed, not waved through."""
    policy = _policy(builtin_profiles=True, profiles={"continue": None})
    tools = [_tool("Read", _obj(filepath=S))]
    assert _call(policy, tools, "Read", {"filepath": "/etc/passwd"}) == ("absolute_path",)
    assert _call(policy, tools, "Read", {"filepath": "src/app/a.py"}) == ()


@pytest.mark.parametrize(("url", "ok"), [
    ("https://example.com/x", True), ("http://8.8.8.8/", True), ("example.com/page", True),
    ("http://169.254.169.254/latest", False), ("http://127.1/", False), ("http://2130706433/", False),
    ("http://0x7f.1/", False), ("http://0177.0.0.1/", False), ("http://0/", False), ("http://[::1]/", False),
    ("http://[::ffff:127.0.0.1]/", False), ("http://[::ffff:a9fe:a9fe]/", False), ("http://[fe80::1]/", False),
    ("http://[2002:7f00:1::]/", False), ("http://localhost/", False), ("http://app.localhost/", False),
    ("http://LOCALHOST./", False), ("http://metadata.google.internal/", False), ("http://intranet/", False),
    ("http://10.1.2.3/", False), ("http://172.16.0.1/", False), ("http://192.168.1.1/", False),
    ("http://100.64.0.1/", False), ("http://224.0.0.1/", False), ("http://ⓛocalhost/", False),
    ("http://１２７.０.０.１/", False), ("http://%31%32%37.0.0.1/", False), ("http://a.com\\@127.0.0.1/", False),
    ("http://user@127.0.0.1/", False), ("ftp://example.com/", False), ("file:///etc/passwd", False),
    ("gopher://example.com/", False), ("javascript:alert(1)", False), ("http://exa mple.com/", False),
    ("http://example.com:99999/", False), ("http:///x", False),
])  # fmt: skip
def test_url_rules_default(url: str, ok: bool) -> None:
    assert (url_problem(url, UrlRules()) is None) == ok


def test_url_rules_policy_lists() -> None:
    rules = UrlRules(allow_hosts=["10.0.0.0/8", "*.corp.example", "localhost"], deny_hosts=["evil.com", "*.bad.io"])
    assert url_problem("http://10.2.3.4/", rules) is None
    assert url_problem("http://wiki.corp.example/", rules) is None
    assert url_problem("http://localhost:3000/", rules) is None
    assert url_problem("https://evil.com/", rules) == "url"
    assert url_problem("https://x.bad.io/", rules) == "url"
    assert url_problem("http://192.168.0.1/", rules) == "url"
    policy = load_policy_text("name: p\nurls:\n  allow_hosts: [docs.internal]\n  schemes: [https]\n").policy
    assert judge_call(policy, "webfetch", {"url": "https://docs.internal/a"}).allowed
    assert judge_call(policy, "webfetch", {"url": "http://example.com/"}).reasons == ("url",)


ARGS_POLICY = """
name: p
paths: {project_root: [/home/dev/project]}
shell:
  scripts:
    search:
      flags: [--max-results, --format, --target, --since]
      args:
        positional: any
        flags:
          --max-results: int
          --format: {enum: [json, text]}
          --target: path
          --since: {regex: "[0-9]{4}-[0-9]{2}"}
    fetch_page:
      args: {positional: [url]}
    build:
      args: {positional: [path, {url: {schemes: [https], allow_hosts: [10.0.0.0/8]}}]}
    plain: {}
"""


@pytest.mark.parametrize(("command", "reasons"), [
    ("uv run scripts/search.py 'rust async' --max-results 5", ()),
    ("uv run scripts/search.py x --max-results=five", ("argument",)),
    ("uv run scripts/search.py x --max-results", ("argument",)),
    ("uv run scripts/search.py x --format json", ()),
    ("uv run scripts/search.py x --format xml", ("argument",)),
    ("uv run scripts/search.py x --target src/out", ()),
    ("uv run scripts/search.py x --target /etc/passwd", ("argument", "absolute_path")),
    ("uv run scripts/search.py x --target=../../x", ("argument", "path_escape")),
    ("uv run scripts/search.py x --target /home/dev/project/out", ()),
    ("uv run scripts/search.py x --since 2026-01", ()),
    ("uv run scripts/search.py x --since yesterday", ("argument",)),
    ("uv run scripts/search.py /etc/shadow", ()),  # positional: any
    ("uv run scripts/fetch_page.py https://example.com", ()),
    ("uv run scripts/fetch_page.py http://169.254.169.254/", ("argument", "url")),
    ("uv run scripts/fetch_page.py https://a.com https://b.com", ("argument",)),
    ("uv run scripts/build.py src https://10.0.0.7/x", ()),
    ("uv run scripts/build.py src http://10.0.0.7/x", ("argument", "url")),
    ("uv run scripts/plain.py /etc/shadow", ("argument", "absolute_path")),
    ("uv run scripts/plain.py ../../secret", ("argument", "path_escape")),
    ("uv run scripts/plain.py file:///etc/passwd", ("argument", "absolute_path")),
    ("uv run scripts/plain.py '~/x'", ("argument", "path_escape")),
    ("uv run scripts/plain.py 'see /etc/passwd'", ()),
    ("uv run scripts/plain.py http://localhost/", ("argument", "url")),
    ("uv run scripts/plain.py /home/dev/project/data.csv", ()),
])  # fmt: skip
def test_script_argument_rules(command: str, reasons: tuple[str, ...]) -> None:
    policy = load_policy_text(ARGS_POLICY.replace("plain: {}", "plain: {}\n  scripts_path: null")).policy
    roots = tuple(policy.paths.project_root)
    verdict = judge_command(policy, command, roots=roots)
    assert verdict.reasons == reasons, verdict
    if reasons:
        assert verdict.shape and verdict.shape.startswith("argument:")
    # Through a shell tool the call's project roots apply the same way.
    assert judge_call(policy, "bash", {"command": command}).reasons == reasons


def test_script_argument_rules_validated() -> None:
    with pytest.raises(PolicyError) as info:
        load_policy_text("name: p\nshell:\n  scripts:\n    s:\n      args: {flags: {--x: int}}\n")
    assert "does not declare" in info.value.message
    with pytest.raises(PolicyError):
        load_policy_text("name: p\nshell:\n  scripts:\n    s:\n      args: {positional: float}\n")
    with pytest.raises(PolicyError):
        load_policy_text("name: p\nshell:\n  scripts:\n    s:\n      args: {positional: {regex: '('}}\n")
    # `bash:` (the older name) reads the same rules.
    policy = load_policy_text("name: p\nbash:\n  scripts:\n    s:\n      args: {positional: int}\n").policy
    assert judge_command(policy, "uv run scripts/s.py x").reasons == ("argument",)
    assert judge_command(policy, "uv run scripts/s.py 3").allowed


def test_kilo_background_process_from_its_catalogue() -> None:
    """Kilo 7.7's `background_process {action, command, workdir, ...}`: no profile, classified as a shell
    whose command is optional (`list` runs nothing) and whose workdir is a path."""
    import json
    from pathlib import Path

    catalogue = json.loads((Path(__file__).parent / "client_tools" / "kilo.json").read_text())
    policy = _policy()
    tools = catalogue["tools"]
    assert _call(policy, tools, "background_process", {"action": "list"}) == ()
    assert _call(policy, tools, "background_process", {"action": "start", "command": ALLOWED}) == ()
    assert _call(policy, tools, "background_process", {"action": "start", "command": "npm run dev"}) == (
        "program",)
    assert _call(policy, tools, "background_process", {"action": "start", "command": ALLOWED,
                                                        "workdir": "/tmp"}) == ("absolute_path",)
    assert _call(policy, tools, "link_pr", {"url": "http://10.0.0.1/pr/1"}) == ("url",)


@pytest.mark.parametrize(("client", "tool", "arguments", "reasons"), [
    # LangChain's ShellTool: `commands` is a string or a list of strings, each judged.
    ("langchain", "terminal", {"commands": ALLOWED}, ()),
    ("langchain", "terminal", {"commands": [ALLOWED, "ls | head"]}, ("pipe",)),
    ("langchain", "terminal", {"commands": "rm -rf /"}, ("program",)),
    ("langchain", "copy_file", {"source_path": "a.txt", "destination_path": "/etc/cron.d/x"}, ("absolute_path",)),
    ("langchain", "requests_get", {"url": "http://127.0.0.1:2375/containers/json"}, ("url",)),
    # pydantic-ai: optional arguments are `anyOf [string, null]`; null is absent.
    ("pydantic-ai", "run_command", {"command": ALLOWED, "cwd": None}, ()),
    ("pydantic-ai", "run_command", {"command": ALLOWED, "cwd": "/"}, ("absolute_path",)),
    ("pydantic-ai", "read_file", {"path": "../../.ssh/id_rsa", "encoding": None}, ("path_escape",)),
    ("pydantic-ai", "web_fetch", {"url": "http://[fd00::1]/"}, ("url",)),
    # Continue: `filepath`, `dirpath`.
    ("continue", "Read", {"filepath": "/etc/passwd"}, ("absolute_path",)),
    ("continue", "List", {"dirpath": "~"}, ("path_escape",)),
    ("continue", "Fetch", {"url": "http://localhost:8080"}, ("url",)),
    ("smolagents", "python_interpreter", {"code": "print(open(\"x\").read())"}, ("subshell",)),
    ("smolagents", "visit_webpage", {"url": "http://169.254.169.254/"}, ("url",)),
    ("mini-swe-agent", "bash", {"command": "cat /etc/shadow"}, ("program",)),
    ("vercel-ai-sdk", "readFile", {"path": "/root/.aws/credentials"}, ("absolute_path",)),
    ("vercel-ai-sdk", "updateTodos", {"items": [{"text": "fix the parser", "done": False}]}, ()),
    ("openai-agents", "shell_call", {"commands": [ALLOWED, "curl x"]}, ("program",)),
])  # fmt: skip
def test_vocabularies_of_the_captured_clients(client: str, tool: str, arguments: dict[str, Any],
                                              reasons: tuple[str, ...]) -> None:
    import json
    from pathlib import Path

    catalogue = json.loads((Path(__file__).parent / "client_tools" / f"{client}.json").read_text())
    assert _call(_policy(), catalogue["tools"], tool, arguments)[:1] == reasons  # the primary reason


def test_known_tool_name_with_file_arguments_is_governed() -> None:
    """A name a profile lists as harmless (`{}`), offered with a file, URL or command argument, has it
    judged; a `command` argument the profile knows (OpenCode's `task` names a slash command) is not read as
    a shell, while the same argument added to Qwen Code's `task` (which has none) is."""
    policy = _policy()
    tools = [_tool("todo_write", _obj(todos=S, file_path=S)), _tool("web_search", _obj(query=S, url=S)),
             _tool("task", _obj(description=S, prompt=S, command=S)),
             _tool("run_shell_command", _obj(command=S, directory=S))]
    assert _call(policy, tools, "todo_write", {"todos": "x", "file_path": "/etc/passwd"}) == ("absolute_path",)
    assert _call(policy, tools, "todo_write", {"todos": "x"}) == ()
    assert _call(policy, tools, "web_search", {"query": "q", "url": "http://127.0.0.1/"}) == ("url",)
    assert _call(policy, tools, "task", {"description": "d", "prompt": "p", "command": "/review"}) == ("program",)
    opencode = [_tool("bash", _obj(command=S, workdir=S)), _tool("webfetch", _obj(url=S)),
                _tool("task", _obj(description=S, prompt=S, command=S))]
    assert _call(policy, opencode, "task", {"description": "d", "prompt": "p", "command": "/review"}) == ()
