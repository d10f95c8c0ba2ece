"""`allowlist-proxy check`: judge one command (or tool call), or a batch of them, against a policy.

    allowlist-proxy check [--policy FILE] [--tool NAME] COMMAND
    allowlist-proxy check [--policy FILE] --jsonl < calls.jsonl

One command prints `{"decision", "reasons", "shape"}` and exits 0 when allowed, 1 otherwise. For a tool
that is not a bash tool, COMMAND is the tool's arguments as a JSON object. `--jsonl` reads lines
`{"cmd": "..."}` or `{"tool": "...", "arguments": {...}}` (what `extract --calls` prints) and prints one
verdict per line with the line it judged as `input`, exiting 0.
A policy that cannot be loaded exits 2 with its error on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from ..policy import Policy, PolicyError, default_policy_path, judge_call, judge_command, load_policy_file
from ..policy.verdict import MALFORMED, Verdict

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="judge a bash command or a tool call against a policy",
        description="Judge a bash command, or a tool call's JSON arguments (--tool), against a policy. "
        "Prints {decision, reasons, shape}; exits 0 when allowed, 1 when not, 2 when the policy cannot load.",
        epilog="examples:\n"
        "  allowlist-proxy check 'uv run scripts/search.py \"rust async\"'\n"
        "  allowlist-proxy check --tool read '{\"filePath\": \"../secrets\"}'\n"
        "  allowlist-proxy extract --calls < output.txt | allowlist-proxy check --jsonl\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--policy", metavar="FILE", help="policy file (default: policies/strict.yaml)")
    parser.add_argument(
        "--tool", metavar="NAME", help="the tool called (default: the policy's bash tool); "
        "for other tools COMMAND is the arguments as a JSON object",
    )  # fmt: skip
    parser.add_argument("--jsonl", action="store_true", help="read one call per line from stdin")
    parser.add_argument("command", nargs="?", metavar="COMMAND", help="the command (or JSON arguments)")
    parser.set_defaults(func=run)


def _judge(policy: Policy, tool: str | None, payload: str) -> Verdict:
    if tool is None or tool in policy.bash.tools:
        return judge_command(policy, payload)
    try:
        arguments = json.loads(payload)
    except ValueError:
        arguments = None
    return judge_call(policy, tool, arguments if isinstance(arguments, dict) else None)


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


def _print(verdict: Verdict, out: TextIO, echo: str | None = None) -> None:
    body = verdict.as_dict()
    if echo is not None:  # the judged line beside its verdict, so a batch's output reads on its own
        try:
            body = {"input": json.loads(echo), **body}
        except ValueError:
            body = {"input": echo.rstrip("\n"), **body}
    out.write(json.dumps(body, ensure_ascii=False) + "\n")


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
                _print(_judge_line(policy, line), stdout, echo=line)
        stdout.flush()
        return 0
    if args.command is None:
        sys.stderr.write("allowlist-proxy check: give a COMMAND, or --jsonl to read calls from stdin\n")
        return 2
    verdict = _judge(policy, args.tool, args.command)
    _print(verdict, stdout)
    return 0 if verdict.allowed else 1
