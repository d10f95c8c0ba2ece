"""`allowlist-proxy check`: judge one command (or tool call), or a batch of them, against a policy.

    allowlist-proxy check [--policy FILE] [--tool NAME] COMMAND
    allowlist-proxy check [--policy FILE] --jsonl < calls.jsonl

One command prints `{"decision", "reasons", "shape"}` and exits 0 when allowed, 1 otherwise. With `--tool`,
COMMAND is the tool's arguments as a JSON object, judged through the tool profiles as the proxy judges that
tool's call (`--tool exec_command '{"cmd": "..."}'`, `--tool Read '{"file_path": "/etc/passwd"}'`); a shell
tool's bare command text is still accepted. `--jsonl` reads lines
`{"cmd": "..."}` or `{"tool": "...", "arguments": {...}}` (what `extract --calls` prints) and prints one
verdict per line with the line it judged as `input`, exiting 0.
A policy that cannot be loaded exits 2 with its error on stderr.

`--explain` adds what a model would read back for a rejected call: `feedback` (the policy's template,
filled in) and `suggestion` (`{kind, command, text}` of the nearest allowed command, or null).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from ..enforce.judging import judge_offline
from ..policy import LoadedPolicy, Policy, PolicyError, default_policy_path, format_feedback, load_policy_file
from ..policy.feedback.suggest import suggest
from ..policy.file.reload_guard import reload_verdict
from ..policy.judge import tool_set
from ..policy.verdict import MALFORMED, Verdict
from .command import HelpFormatter

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
        "  allowlist-proxy check --tool write '{\"filePath\": \".git/config\"}'\n"
        "  allowlist-proxy check --reload-against policies/strict.yaml --policy edited.yaml\n"
        "  allowlist-proxy extract --calls < output.txt | allowlist-proxy check --jsonl\n",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--policy", metavar="FILE", help="policy file (default: policies/strict.yaml)")
    parser.add_argument(
        "--tool", metavar="NAME", help="the tool called (a tool of any profile: bash, run_shell_command, "
        "exec_command, Read, read_files, ...); COMMAND is then its arguments as a JSON object",
    )  # fmt: skip
    parser.add_argument("--jsonl", action="store_true", help="read one call per line from stdin")
    parser.add_argument(
        "--reload-against", metavar="SERVED", help="the policy file being served: print what a live reload "
        "would do with --policy FILE ({reload: apply|hold|refuse, reason}), the same decision the proxy takes; "
        "exits 0 when it applies live, 1 when it is held (widens: only SIGHUP applies it) or refused",
    )  # fmt: skip
    parser.add_argument("--explain", action="store_true",
                        help="also print the feedback a model would read and the suggested allowed command")
    parser.add_argument("command", nargs="?", metavar="COMMAND", help="the command (or JSON arguments)")
    parser.set_defaults(func=run)


# A judged call: the tool, its arguments (None when unreadable) and the verdict.
Judged = tuple[str, dict[str, Any] | None, Verdict]
_UNREADABLE = Verdict(MALFORMED, ("bad_arguments",), "bad_arguments")


def _call(loaded: LoadedPolicy, tool: str, arguments: str | dict[str, Any] | None) -> Judged:
    judged = judge_offline(loaded, tool, arguments)  # as the proxy judges it
    return tool, judged.call.arguments, judged.verdict


def _bash_call(loaded: LoadedPolicy, command: str) -> Judged:
    policy = loaded.policy
    tool = policy.bash.tools[0] if policy.bash.tools else "bash"
    return _call(loaded, tool, {policy.bash.command_argument: command})


def _judge(loaded: LoadedPolicy, tool: str | None, payload: str) -> Judged:
    if tool is None:
        return _bash_call(loaded, payload)
    try:
        arguments = json.loads(payload)
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict) and _is_string_shell(loaded.policy, tool):
        # `--tool bash 'uv run ...'`: a shell tool's command given as it is, not wrapped in JSON.
        return _bash_call(loaded, payload)
    return _call(loaded, tool, payload)


def _is_string_shell(policy: Policy, tool: str) -> bool:
    """Whether the tool's profiles all take its command as one string argument."""
    rules = [r for r in tool_set(policy).rules(tool, {}) if r.map.shell is not None]
    return bool(rules) and all(r.map.shell is not None and r.map.shell.command for r in rules)


def _judge_line(loaded: LoadedPolicy, line: str) -> Judged:
    try:
        item = json.loads(line)
    except ValueError:
        return "", None, _UNREADABLE
    if not isinstance(item, dict):
        return "", None, _UNREADABLE
    if "cmd" in item:
        cmd = item["cmd"]
        if not isinstance(cmd, str):
            return "", None, _UNREADABLE
        return _bash_call(loaded, cmd)
    tool = item.get("tool")
    if not isinstance(tool, str):
        return "", None, _UNREADABLE
    arguments = item.get("arguments")  # an object, or a JSON text as the model sent it
    return _call(loaded, tool, arguments if isinstance(arguments, str | dict) else None)


def _print(policy: Policy, judged: Judged, out: TextIO, *, explain: bool, echo: str | None = None) -> None:
    tool, arguments, verdict = judged
    shown: dict[str, Any] = verdict.as_dict()
    if explain:
        found = suggest(policy, tool, arguments, verdict)
        shown["feedback"] = (None if verdict.allowed else
                             format_feedback(policy, verdict, tool=tool, arguments=arguments))
        shown["suggestion"] = found.as_dict() if found is not None else None
    if echo is not None:  # the judged line beside its verdict, so a batch's output reads on its own
        try:
            shown = {"input": json.loads(echo), **shown}
        except ValueError:
            shown = {"input": echo.rstrip("\n"), **shown}
    out.write(json.dumps(shown, ensure_ascii=False) + "\n")


def run(args: argparse.Namespace, *, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    try:
        loaded = load_policy_file(args.policy or default_policy_path())
    except PolicyError as error:
        sys.stderr.write(f"allowlist-proxy check: {error}\n")
        return 2
    policy = loaded.policy
    if args.reload_against:
        try:
            served = load_policy_file(args.reload_against)
        except PolicyError as error:
            sys.stderr.write(f"allowlist-proxy check: {error}\n")
            return 2
        verdict = reload_verdict(served, loaded)
        stdout.write(json.dumps({"reload": verdict.action, "reason": verdict.reason}) + "\n")
        if args.command is None and not args.jsonl:
            return 0 if verdict.action == "apply" else 1
    if args.jsonl:
        for line in stdin:
            if line.strip():
                _print(policy, _judge_line(loaded, line), stdout, explain=args.explain, echo=line)
        stdout.flush()
        return 0
    if args.command is None:
        sys.stderr.write("allowlist-proxy check: give a COMMAND, or --jsonl to read calls from stdin\n")
        return 2
    judged = _judge(loaded, args.tool, args.command)
    _print(policy, judged, stdout, explain=args.explain)
    return 0 if judged[2].allowed else 1
