"""judge_call: bash calls with workdir, path arguments, unknown tools, malformed arguments, other tools."""

from __future__ import annotations

import pytest

from proxy.policy import Policy, judge_call
from proxy.policy.paths.inside import path_problem


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("src/main.py", None),
        ("./src/main.py", None),
        ("a/../b", None),
        ("", None),
        (".", None),
        ("/etc/passwd", "absolute_path"),
        ("\\\\server\\share", "absolute_path"),
        ("C:\\x", "absolute_path"),
        ("c:/x", "absolute_path"),
        ("file:///etc/passwd", "absolute_path"),
        ("a:b", "absolute_path"),  # drive-relative on Windows
        ("notes:v2.txt", None),
        ("../x", "path_escape"),
        ("a/../../x", "path_escape"),
        ("a\\..\\..\\x", "path_escape"),
        ("..", "path_escape"),
        ("~/x", "path_escape"),
        ("~user/x", "path_escape"),
        ("~", "path_escape"),
    ],
)
def test_path_problem(path: str, problem: str | None) -> None:
    assert path_problem(path) == problem


def test_read_paths(policy: Policy) -> None:
    assert judge_call(policy, "read", {"filePath": "src/x.py"}).allowed
    verdict = judge_call(policy, "read", {"filePath": "/etc/passwd"})
    assert (verdict.decision, verdict.reasons, verdict.shape) == (
        "reject",
        ("absolute_path",),
        "absolute_path:read.filePath",
    )
    assert judge_call(policy, "edit", {"filePath": "../x", "oldString": "a", "newString": "b"}).reasons == (
        "path_escape",
    )
    assert judge_call(policy, "glob", {"pattern": "**/*.py"}).allowed  # optional path absent
    assert judge_call(policy, "grep", {"pattern": "x", "path": "~/secrets"}).reasons == ("path_escape",)


def test_path_argument_of_wrong_type_is_malformed(policy: Policy) -> None:
    verdict = judge_call(policy, "read", {"filePath": 3})
    assert (verdict.decision, verdict.reasons) == ("malformed", ("bad_arguments",))


def test_bash_calls(policy: Policy) -> None:
    assert judge_call(policy, "bash", {"command": "uv run scripts/search.py x"}).allowed
    assert judge_call(policy, "bash", {"command": "uv run scripts/search.py x", "workdir": "sub/dir"}).allowed
    workdir = judge_call(policy, "bash", {"command": "uv run scripts/search.py x", "workdir": "/tmp"})
    assert (workdir.decision, workdir.reasons, workdir.shape) == (
        "reject",
        ("absolute_path",),
        "absolute_path:bash.workdir",
    )
    both = judge_call(policy, "bash", {"command": "ls | head", "workdir": "../up"})
    assert both.reasons == ("pipe", "path_escape") and both.shape == "pipe"
    assert judge_call(policy, "bash", {"command": "ls"}).reasons == ("program",)


@pytest.mark.parametrize(
    "arguments", [None, {}, {"command": 3}, {"command": None}, {"cmd": "ls"}, {"command": "ls", "workdir": 1}]
)
def test_bash_bad_arguments(policy: Policy, arguments: dict | None) -> None:
    verdict = judge_call(policy, "bash", arguments)
    assert (verdict.decision, verdict.reasons, verdict.shape) == ("malformed", ("bad_arguments",), "bad_arguments")


def test_non_dict_arguments_are_malformed(policy: Policy) -> None:
    for arguments in ([], "x", 3):
        assert judge_call(policy, "webfetch", arguments).decision == "malformed"  # type: ignore[arg-type]


def test_unknown_tool(policy: Policy) -> None:
    offered = {"bash", "read"}
    verdict = judge_call(policy, "write", {"filePath": "x", "content": ""}, offered_tools=offered)
    assert (verdict.decision, verdict.reasons, verdict.shape) == ("reject", ("unknown_tool",), "unknown_tool:write")
    assert judge_call(policy, "read", {"filePath": "x"}, offered_tools=offered).allowed
    both = judge_call(policy, "nope", None, offered_tools=offered)
    assert (both.decision, both.reasons) == ("malformed", ("bad_arguments", "unknown_tool"))


def test_other_tools(policy: Policy) -> None:
    assert judge_call(policy, "todowrite", {"todos": [{"content": "x"}]}).allowed
    strict = policy.model_copy(update={"other_tools": "reject"})
    verdict = judge_call(strict, "todowrite", {"todos": []})
    assert (verdict.decision, verdict.reasons, verdict.shape) == ("reject", ("unknown_tool",), "unknown_tool:todowrite")
    # A web fetch is governed by the URL rules whatever `other_tools` says.
    assert judge_call(strict, "webfetch", {"url": "https://example.com/a"}).allowed
    assert judge_call(policy, "webfetch", {"url": "http://169.254.169.254/"}).reasons == ("url",)


def test_path_lists_and_custom_bash_tools() -> None:
    policy = Policy.model_validate(
        {"name": "t", "bash": {"tools": ["shell"], "command_argument": "cmd", "workdir_argument": None,
                               "scripts": {"s": {}}},
         "paths": {"glob": ["path", "pattern"]}}
    )  # fmt: skip
    assert judge_call(policy, "shell", {"cmd": "uv run scripts/s.py", "workdir": "/ignored"}).allowed
    assert judge_call(policy, "glob", {"pattern": "/etc/*"}).reasons == ("absolute_path",)
    # Not a bash tool of this policy's own keys, but OpenCode's shell: the built-in profile governs it.
    assert judge_call(policy, "bash", {"command": "rm -rf /"}).reasons == ("program",)
    # Without the built-in profiles, an unknown tool with a `command` argument is still judged as a shell.
    alone = policy.model_copy(update={"builtin_profiles": False})
    assert judge_call(alone, "bash", {"command": "rm -rf /"}).reasons == ("program",)
    assert judge_call(alone, "bash", {"query": "rm -rf /"}).allowed
