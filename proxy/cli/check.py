"""`allowlist-proxy check`: judge one command (or tool call), or a batch of them, against a policy.

    allowlist-proxy check [--policy FILE] [--tool NAME] COMMAND
    allowlist-proxy check [--policy FILE] --jsonl < calls.jsonl

One command prints `{"decision", "reasons", "shape"}` and exits 0 when allowed, 1 otherwise. With `--tool`,
COMMAND is the tool's arguments as a JSON object, judged through the tool profiles as the proxy judges that
tool's call (`--tool exec_command '{"cmd": "..."}'`, `--tool Read '{"file_path": "/etc/passwd"}'`); a shell
tool's bare command text is still accepted. `--jsonl` reads lines
`{"cmd": "..."}` or `{"tool": "...", "arguments": {...}}` and prints one verdict per line, exiting 0.
A policy that cannot be loaded exits 2 with its error on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from ..policy import Policy, PolicyError, default_policy_path, judge_call, judge_command, load_policy_file
from ..policy.judge import tool_set
from ..policy.verdict import MALFORMED, Verdict

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="judge a bash command or a tool call against a policy",
        description="Judge a bash command, or a tool call's JSON arguments (--tool), against a policy. "
        "Prints {decision, reasons, shape}; exits 0 when allowed, 1 when not, 2 when the policy cannot load.",
    )
    parser.add_argument("--policy", metavar="FILE", help="policy file (default: policies/strict.yaml)")
    parser.add_argument(
        "--tool", metavar="NAME", help="the tool called (a tool of any profile: bash, run_shell_command, "
        "exec_command, Read, read_files, ...); COMMAND is then its arguments as a JSON object",
    )  # fmt: skip
    parser.add_argument("--jsonl", action="store_true", help="read one call per line from stdin")
    parser.add_argument("command", nargs="?", metavar="COMMAND", help="the command (or JSON arguments)")
    parser.set_defaults(func=run)


def _judge(policy: Policy, tool: str | None, payload: str) -> Verdict:
    if tool is None:
        return judge_command(policy, payload)
    try:
        arguments = json.loads(payload)
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict) and _is_string_shell(policy, tool):
        # `--tool bash 'uv run ...'`: a shell tool's command given as it is, not wrapped in JSON.
        return judge_command(policy, payload)
    return judge_call(policy, tool, arguments if isinstance(arguments, dict) else None)


def _is_string_shell(policy: Policy, tool: str) -> bool:
    """Whether the tool's profiles all take its command as one string argument."""
    rules = [r for r in tool_set(policy).rules(tool, {}) if r.map.shell is not None]
    return bool(rules) and all(r.map.shell is not None and r.map.shell.command for r in rules)


def _judge_line(policy: Policy, line: str) -> Verdict:
    try:
        item = json.loads(line)
    except ValueError:
        return Verdict(MALFORMED, ("bad_arguments",), "bad_arguments")
    if not isinstance(item, dict):
        return Verdict(MALFORMED, ("bad_arguments",), "bad_arguments")
    if "cmd" in item:
        cmd = item["cmd"]
        if not isinstance(cmd, str):
            return Verdict(MALFORMED, ("bad_arguments",), "bad_arguments")
        return judge_command(policy, cmd)
    tool = item.get("tool")
    if not isinstance(tool, str):
        return Verdict(MALFORMED, ("bad_arguments",), "bad_arguments")
    arguments = item.get("arguments")
    if isinstance(arguments, str):  # arguments as the model sent them: a JSON text
        try:
            arguments = json.loads(arguments)
        except ValueError:
            arguments = None
    return judge_call(policy, tool, arguments if isinstance(arguments, dict) else None)


def _print(verdict: Verdict, out: TextIO) -> None:
    out.write(json.dumps(verdict.as_dict(), ensure_ascii=False) + "\n")


def run(args: argparse.Namespace, *, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    try:
        loaded = load_policy_file(args.policy or default_policy_path())
    except PolicyError as error:
        sys.stderr.write(f"allowlist-proxy check: {error}\n")
        return 2
    policy = loaded.policy
    if args.jsonl:
        for line in stdin:
            if line.strip():
                _print(_judge_line(policy, line), stdout)
        stdout.flush()
        return 0
    if args.command is None:
        sys.stderr.write("allowlist-proxy check: give a COMMAND, or --jsonl to read calls from stdin\n")
        return 2
    verdict = _judge(policy, args.tool, args.command)
    _print(verdict, stdout)
    return 0 if verdict.allowed else 1
