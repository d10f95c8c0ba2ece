"""`allowlist-proxy check`, called through its own parser (the CLI dispatcher is wired by the lead)."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from proxy.cli import check

from .conftest import ROOT

STRICT = str(ROOT / "policies" / "strict.yaml")


def _run(argv: list[str], stdin: str = "") -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="allowlist-proxy")
    check.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["check", *argv])
    out = io.StringIO()
    code = args.func(args, stdin=io.StringIO(stdin), stdout=out)
    return code, out.getvalue()


def test_single_reject_prints_pipe() -> None:
    code, out = _run(["--policy", STRICT, "uv run scripts/search.py | head -5"])
    assert code == 1
    assert json.loads(out) == {"decision": "reject", "reasons": ["pipe"], "shape": "pipe"}


def test_single_allow() -> None:
    code, out = _run(["--policy", STRICT, 'uv run scripts/search.py "rust async"'])
    assert code == 0
    assert json.loads(out) == {"decision": "allow", "reasons": [], "shape": None}


def test_default_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    code, out = _run(["uv run scripts/search.py | head -5"])
    assert code == 1 and json.loads(out)["reasons"] == ["pipe"]


def test_tool_arguments_as_json() -> None:
    code, out = _run(["--policy", STRICT, "--tool", "read", '{"filePath": "/etc/passwd"}'])
    assert code == 1 and json.loads(out)["reasons"] == ["absolute_path"]
    code, out = _run(["--policy", STRICT, "--tool", "read", '{"filePath": "src/x.py"}'])
    assert code == 0
    code, out = _run(["--policy", STRICT, "--tool", "read", "not json"])
    assert code == 1 and json.loads(out) == {
        "decision": "malformed",
        "reasons": ["bad_arguments"],
        "shape": "bad_arguments",
    }
    code, out = _run(["--policy", STRICT, "--tool", "bash", "uv run scripts/search.py x"])
    assert code == 0


@pytest.mark.parametrize(("tool", "arguments", "reasons"), [
    ("bash", {"command": "uv run scripts/search.py x | head -5", "workdir": "sub"}, ["pipe"]),
    ("run_shell_command", {"command": "uv run scripts/search.py x | head -5"}, ["pipe"]),
    ("exec_command", {"cmd": "uv run scripts/search.py x | tail -3", "workdir": "/tmp"}, ["pipe", "absolute_path"]),
    ("exec_command", {"cmd": "uv run scripts/search.py x"}, []),
    ("Bash", {"command": "cat ~/.ssh/id_rsa"}, ["expansion"]),
    ("local_shell_call", {"type": "exec", "command": ["bash", "-lc", "uv run scripts/search.py x"]}, []),
    ("run_commands", {"commands": ["uv run scripts/search.py x", "curl x"]}, ["program"]),
    ("Read", {"file_path": "/etc/passwd"}, ["absolute_path"]),
    ("read_files", {"files": [{"path": "../x"}]}, ["path_escape"]),
    ("some_runner", {"cmd": "ls"}, ["program"]),
])  # fmt: skip
def test_tool_calls_of_every_client_are_judged_as_the_proxy_does(tool: str, arguments: dict, reasons: list) -> None:
    """`--tool NAME` judges a profiled tool's JSON arguments, not the JSON text as a command."""
    code, out = _run(["--policy", STRICT, "--tool", tool, json.dumps(arguments)])
    assert json.loads(out)["reasons"] == reasons and code == (0 if not reasons else 1)
    code, out = _run(["--policy", STRICT, "--jsonl"], json.dumps({"tool": tool, "arguments": arguments}) + "\n")
    assert json.loads(out)["reasons"] == reasons


def test_jsonl_batch() -> None:
    lines = [
        json.dumps({"cmd": "uv run scripts/search.py x"}),
        json.dumps({"cmd": "curl -s https://x"}),
        "",
        json.dumps({"tool": "read", "arguments": {"filePath": "../x"}}),
        json.dumps({"tool": "bash", "arguments": '{"command": "uv run scripts/search.py"}'}),
        "not json",
    ]
    code, out = _run(["--policy", STRICT, "--jsonl"], "\n".join(lines) + "\n")
    assert code == 0
    results = [json.loads(line) for line in out.splitlines()]
    assert [r["decision"] for r in results] == ["allow", "reject", "reject", "allow", "malformed"]
    assert results[1]["shape"] == "program:curl" and results[2]["reasons"] == ["path_escape"]


def test_bad_policy_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\nmode: x\n")
    code, out = _run(["--policy", str(bad), "uv run scripts/search.py"])
    assert code == 2 and out == ""
    assert f"{bad}:2: mode:" in capsys.readouterr().err


def test_missing_command_exits_2() -> None:
    assert _run(["--policy", STRICT])[0] == 2
