"""Adversarial cases for fail-closed tools, kept apart from the cases the issue names: schemas that hide a
command, path or URL argument; values that are paths or URLs in disguise; script arguments in other forms;
command arguments of tools a profile lists as harmless."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.policy import judge_call, judge_command, load_policy_text
from proxy.policy.schema import UrlRules
from proxy.policy.tools.content import value_problem
from proxy.policy.tools.profiles import ToolSet

from .test_classify import ARGS_POLICY as CLASSIFY_ARGS_POLICY
from .test_classify import ROOT_DIR, _obj, _policy, _tool
from .test_classify import _call as _judged

ALLOWED = "uv run scripts/search.py x"
S = {"type": "string"}


def _call(tools: list[dict[str, Any]], name: str, arguments: dict[str, Any]) -> tuple[str, ...]:
    return _judged(_policy(), tools, name, arguments)


@pytest.mark.parametrize(("value", "problem"), [
    ("FILE:///etc/passwd", "absolute_path"), ("file:/etc", "absolute_path"), ("file:///%65tc/passwd", "absolute_path"),
    ("\\\\server\\share", "absolute_path"), ("C:/x", "absolute_path"), ("/proc/self/environ", "absolute_path"),
    ("~user", "path_escape"), ("$HOME/x", "path_escape"), ("${HOME}/.ssh", "path_escape"),
    ("%USERPROFILE%\\x", "path_escape"), ("..\\..", "path_escape"), (f"{ROOT_DIR}/..", "path_escape"),
    ("a\u2215..\u2215..\u2215etc", "path_escape"), ("\u2025/x", "path_escape"), ("\uff0e\uff0e/x", "path_escape"),
    ("\uff0fetc/passwd", "absolute_path"), ("\u2215etc\u2215passwd", "absolute_path"), ("//host/path", "absolute_path"),
    (" /etc/passwd", "absolute_path"), ("/etc/passwd\n", "absolute_path"), ("\t~/.ssh", "path_escape"),
    ("key=/etc/passwd", "absolute_path"), ("src,/etc/passwd", "absolute_path"), ("@/etc/passwd", "absolute_path"),
    ("http:/127.0.0.1/", "url"), ("http:127.0.0.1", "url"), ("https:\\\\127.0.0.1", "url"),
    ("127.0.0.1:8080", "url"), ("localhost:3000/x", "url"), ("169.254.169.254/latest", "url"), ("[::1]/x", "url"),
    ("10.0.0.1", "url"), ("metadata.google.internal:80", "url"), ("http://[v1.x]/", "url"),
    ("http://[::ffff:127.0.0.1]", "url"), ("http://0x7f.1", "url"), ("http://127.1", "url"),
    ("http://2130706433", "url"), ("http://localhost.", "url"), ("http://LOCALHOST", "url"),
    ("http://169.254.169.254", "url"), ("http://metadata.google.internal", "url"), ("http://[fd00::1]", "url"),
    ("http://allowed.com@127.0.0.1", "url"), ("http://127.0.0.1#@allowed.com", "url"), ("http://ex\tample.com", "url"),
    ("http://loc\u0430lhost/", "url"),
    # Not places: free text, values inside the project, public URLs, times, versions, numbers.
    ("read /etc/passwd please", None), ("line one\n/etc/passwd", None), (f"{ROOT_DIR}/a.txt", None), ("src/../a", None),
    ("https://example.com/?a=1,b=/x", None), ("https://example.com/ok\n", None), ("12:30", None), ("1.2.3.4", None),
    ("3", None), ("Q: what now?", None), ("key=value", None), ("notes about the plan", None), ("a.b:8080", None),
])  # fmt: skip
def test_values_in_disguise(value: str, problem: str | None) -> None:
    assert value_problem(value, (ROOT_DIR,), UrlRules()) == problem


# The unit tests' script rules, and a script whose flags have no rules.
ARGS_POLICY = CLASSIFY_ARGS_POLICY + "    flagged:\n      flags: [--out, -o, --verbose]\n"


@pytest.mark.parametrize(("command", "reasons"), [
    ("uv run scripts/search.py x --target=/etc/passwd", ("argument", "absolute_path")),
    ("uv run scripts/search.py x --target src --target /etc/passwd", ("argument", "absolute_path")),
    ("uv run scripts/search.py x --target ' /etc/passwd'", ("argument", "absolute_path")),
    ("uv run scripts/search.py x --target '\uff0fetc'", ("argument", "absolute_path")),
    ("uv run scripts/search.py x --target '$HOME/x'", ("argument", "path_escape")),
    ("uv run scripts/search.py x --max-results=5 --max-results=/etc/x", ("argument",)),
    ("uv run scripts/flagged.py --out=/etc/passwd", ("argument", "absolute_path")),
    ("uv run scripts/flagged.py --verbose /etc/passwd", ("argument", "absolute_path")),
    ("uv run scripts/flagged.py -o /etc/passwd", ("argument", "absolute_path")),
    ("uv run scripts/flagged.py -- /etc/passwd", ("flag",)),
    ("uv run scripts/flagged.py '/etc/passwd '", ("argument", "absolute_path")),
    ("uv run scripts/flagged.py x=/etc/passwd", ("argument", "absolute_path")),
    ("uv run scripts/flagged.py --out=src,/etc/passwd", ("argument", "absolute_path")),
    ("uv run scripts/flagged.py @/etc/passwd", ("argument", "absolute_path")),
    ("uv run scripts/flagged.py \"FILE:/etc/passwd\"", ("argument", "absolute_path")),
    ("uv run scripts/flagged.py 'file:///%65tc/passwd'", ("argument", "absolute_path")),
    ("uv run scripts/flagged.py http:/127.0.0.1/", ("argument", "url")),
    ("uv run scripts/flagged.py 127.0.0.1:8080", ("argument", "url")),
    ("uv run scripts/flagged.py 'a\u2215..\u2215..\u2215x'", ("argument", "path_escape")),
    ("uv run scripts/flagged.py 'see /etc/passwd'", ()),
    ("uv run scripts/search.py x --target src/a.py", ()),
])  # fmt: skip
def test_script_arguments_in_other_forms(command: str, reasons: tuple[str, ...]) -> None:
    policy = load_policy_text(ARGS_POLICY).policy
    assert judge_command(policy, command, roots=(ROOT_DIR,)).reasons == reasons
    assert judge_call(policy, "bash", {"command": command}).reasons == reasons


@pytest.mark.parametrize(("tool", "arguments", "reason"), [
    ("Read", {"file_path": " /etc/passwd"}, "absolute_path"),
    ("Read", {"file_path": "\uff0fetc/passwd"}, "absolute_path"),
    ("Read", {"file_path": "$HOME/.aws/credentials"}, "path_escape"),
    ("Bash", {"command": ALLOWED, "workdir": "x"}, None),
])  # fmt: skip
def test_known_path_arguments_in_disguise(tool: str, arguments: dict[str, Any], reason: str | None) -> None:
    tools = [_tool("Read", _obj(file_path=S)), _tool("Bash", _obj(command=S))]
    assert _call(tools, tool, arguments)[:1] == ((reason,) if reason else ())


@pytest.mark.parametrize(("schema", "arguments", "reason"), [
    # Other names, descriptions only, formats.
    (_obj(run={"type": "array", "items": S}), {"run": ["rm -rf /"]}, "program"),
    (_obj(line={"type": "string", "description": "The bash command to run"}), {"line": "rm -rf x"}, "program"),
    (_obj(where={"type": "string", "description": "The location on disk to open"}), {"where": "/etc/passwd"},
     "absolute_path"),
    (_obj(x={"type": "string", "format": "uri"}), {"x": "http://127.0.0.1/"}, "url"),
    (_obj(sourceCode=S), {"sourceCode": "import os"}, "program"),
    # Shapes: nested two levels, arrays of objects, prefixItems, tuple items, $defs, type lists.
    (_obj(a=_obj(b=_obj(command=S))), {"a": {"b": {"command": "rm -rf x"}}}, "program"),
    (_obj(steps={"type": "array", "items": _obj(run=S)}), {"steps": [{"run": "rm -rf x"}]}, "program"),
    (_obj(argv={"type": "array", "prefixItems": [S, S]}), {"argv": ["rm", "-rf"]}, "program"),
    (_obj(x={"type": "array", "items": [S, S]}), {"x": ["/etc/passwd"]}, "absolute_path"),
    (_obj(x={"$ref": "#/$defs/C"}) | {"$defs": {"C": _obj(cmd=S)}}, {"x": {"cmd": "rm -rf x"}}, "program"),
    (_obj(command={"type": ["string", "null"]}), {"command": "rm -rf x"}, "program"),
    (_obj(op={"oneOf": [_obj(kind={"const": "a"}, command=S), _obj(kind={"const": "b"}, file=S)]}),
     {"op": {"kind": "b", "file": "../../x"}}, "path_escape"),
    (_obj(command={"allOf": [S]}), {"command": "rm -rf x"}, "program"),
    (_obj(command=True), {"command": "rm -rf x"}, "program"),
    # Open objects in every spelling: what the call carries decides.
    (_obj(a=S) | {"patternProperties": {".*": S}}, {"command": "rm -rf x"}, "program"),
    (_obj(a=S) | {"additionalProperties": S}, {"command": "rm -rf x"}, "program"),
    (_obj(a=S) | {"unevaluatedProperties": S}, {"a": "1", "command": "rm -rf x"}, "program"),
    (_obj(a=S) | {"dependentSchemas": {"a": _obj(command=S)}}, {"a": "1", "command": "rm -rf x"}, "program"),
    (_obj(a={"type": "object", "additionalProperties": True}), {"a": {"command": "rm -rf x"}}, "program"),
    ({"type": "object", "properties": [{"command": S}]}, {"command": "rm -rf x"}, "program"),
    ({"type": "object", "properties": {f"p{i}": S for i in range(1000)}}, {"command": "rm -rf x"}, "program"),
    # The call sends what the schema does not describe: undeclared, outside a closed set, another type.
    (_obj(note=S), {"note": "hi", "command": "rm -rf x"}, "program"),
    (_obj(command={"const": "ls"}), {"command": "rm -rf x"}, "program"),
    (_obj(command={"enum": ["view", "create"]}), {"command": "rm -rf x"}, "program"),
    (_obj(command={"type": "object", "properties": {"name": S}}), {"command": "rm -rf x"}, "program"),
    (_obj(path={"type": "integer"}), {"path": "/etc/passwd"}, "absolute_path"),
    # What the schema describes, sent as described: allowed.
    (_obj(command={"enum": ["view", "create"]}), {"command": "view"}, None),
    (_obj(todos={"type": "array", "items": _obj(content=S)}), {"todos": [{"content": "fix /etc parsing"}]}, None),
    ({"type": "object", "properties": {}, "additionalProperties": False}, {}, None),
    (_obj(count={"type": "integer"}, run_id=S), {"count": 3, "run_id": "r1"}, None),
])  # fmt: skip
def test_schemas_that_hide_an_argument(schema: Any, arguments: dict[str, Any], reason: str | None) -> None:
    assert _call([_tool("mystery", schema)], "mystery", arguments)[:1] == ((reason,) if reason else ())


def test_known_tools_judge_what_their_profile_does_not_claim() -> None:
    """A tool a built-in profile knows, offered with an argument the profile does not claim that can carry a
    command, a path or a URL, has it judged; the arguments the profile claims stay the profile's."""
    tools = [_tool("bash", _obj(command=S, workdir=S)), _tool("webfetch", _obj(url=S)),
             _tool("read", _obj(filePath=S, mirror={"type": "string", "format": "uri"})),
             _tool("todowrite", _obj(todos=S, run=S)),
             _tool("task", _obj(description=S, prompt=S, command=S, cwd=S))]
    assert _call(tools, "read", {"filePath": "a.py", "mirror": "http://169.254.169.254/"}) == ("url",)
    assert _call(tools, "todowrite", {"todos": "x", "run": "rm -rf x"})[:1] == ("program",)
    assert _call(tools, "todowrite", {"todos": "x"}) == ()
    assert _call(tools, "task", {"description": "d", "prompt": "p", "command": "/review"}) == ()
    assert _call(tools, "task", {"description": "d", "prompt": "p", "command": "/review", "cwd": "/etc"}) == (
        "absolute_path",)
    # A profile that claims `command` for its tool keeps it a slash command whatever the description says.
    assert _call(tools, "bash", {"command": ALLOWED, "workdir": "src"}) == ()


@pytest.mark.parametrize(("arguments", "reason"), [
    # Values beside a judged one are still read (the judged argument's path, not its top-level name).
    ({"files": [{"path": "a.txt", "note": "/etc/passwd"}]}, "absolute_path"),
    ({"files": [{"path": "a.txt", "note": "fine"}]}, None),
    ({"files": [{"path": "a.txt", "command": "rm -rf x"}]}, "program"),  # undeclared, nested
    ({"opts": {"depth": "1", "run": "rm -rf x"}}, "program"),  # a free-form object's keys, by name
    ({"tags": [{"command": "rm -rf x"}]}, "program"),  # objects where strings were declared
    ({"tags": ["a", "b"], "opts": {"depth": "2"}}, None),
])  # fmt: skip
def test_nested_parts_the_schema_does_not_describe(arguments: dict[str, Any], reason: str | None) -> None:
    schema = _obj(files={"type": "array", "items": _obj(path=S, note=S)}, opts={"type": "object"},
                  tags={"type": "array", "items": S})
    assert _call([_tool("mystery", schema)], "mystery", arguments)[:1] == ((reason,) if reason else ())


@pytest.mark.parametrize(("url", "reason"), [
    ("http://127.0.0.1.nip.io/", "url"), ("http://10-0-0-1.sslip.io/", "url"),
    ("http://app.169.254.169.254.xip.io/", "url"), ("http://8-8-8-8.sslip.io/", None),
    ("http://[v1.x]/", "url"), ("https://example.com/docs", None),
])  # fmt: skip
def test_names_that_spell_a_private_address(url: str, reason: str | None) -> None:
    assert _call([_tool("fetcher", _obj(url=S))], "fetcher", {"url": url})[:1] == ((reason,) if reason else ())


def test_a_misfit_call_leaves_the_tool_set_as_it_was() -> None:
    """The rules a misfit call adds are its own: the next call of the same tool set is judged afresh."""
    policy = _policy()
    tools = [_tool("editor_action", _obj(command={"enum": ["view", "create"]}))]
    toolset = ToolSet.for_request(policy, {"tools": tools}, {})
    judged = [judge_call(policy, "editor_action", arguments, offered_tools={"editor_action"}, tools=toolset).reasons
              for arguments in ({"command": "rm -rf x"}, {"command": "view"})]
    assert judged == [("program",), ()]


def test_known_tools_prose_is_not_an_argument() -> None:
    """Claude Code's `Bash.description` is described in prose that mentions links and files: a known tool's
    extra arguments are found by name, format and shape, not by their descriptions."""
    prose = {"type": "string", "description": "Clear description of what this command does; a link to the "
                                              "file path or web page it touches, a patch to apply"}
    tools = [_tool("Bash", _obj(command=S, description=prose)), _tool("Read", _obj(file_path=S)),
             _tool("WebFetch", _obj(url=S, prompt=S))]
    assert _call(tools, "Bash", {"command": ALLOWED, "description": "search"}) == ()
    assert _call(tools, "Bash", {"command": ALLOWED, "description": "/etc/passwd"}) == ()


@pytest.mark.parametrize(("schema", "arguments"), [
    (_obj(**{"shell command": S}), {"shell command": "rm -rf x"}),  # a name no argument path can address
    ({}, {"file.path": "/etc/passwd"}),
    (_obj(note=S), {"note": "x", "run[0]": "rm -rf x"}),  # undeclared, unaddressable
    ({}, {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"command": "rm -rf x"}}}}}}}}),  # deeper than read
])  # fmt: skip
def test_unaddressable_capability_arguments_are_refused(schema: Any, arguments: dict[str, Any]) -> None:
    assert _call([_tool("mystery", schema)], "mystery", arguments) == ("bad_arguments",)


def test_a_choice_that_may_fetch_to_a_path_is_judged_as_a_write() -> None:
    """`get` (or `fetch`, `download`) may bring something to the path named: the path is judged as a write, so a
    module an allowed `uv run` would import (sitecustomize) cannot be put there as a "read"."""
    tools = [_tool("file_editor", _obj(command={"enum": ["view", "get", "create"]}, path=S))]
    assert _call(tools, "file_editor", {"command": "view", "path": "sitecustomize.py"}) == ()
    assert _call(tools, "file_editor", {"command": "get", "path": "sitecustomize.py"}) \
        == _call(tools, "file_editor", {"command": "create", "path": "sitecustomize.py"}) == ("protected_path",)
