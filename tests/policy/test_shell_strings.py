"""A shell the model starts itself is a `wrapper`: only an argv that the client's own tool builds is unwrapped.

`bash -c 'uv run scripts/x.py'` typed as the command string of a shell tool, in any shell, with any
login option, in any string-taking shape (one string, a list of commands, a Responses `shell_call`), is
refused; `["bash", "-lc", CMD]` as an argv (Codex's `shell`, a `local_shell_call`) is CMD judged.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.policy import Policy, judge_call

ALLOWED = 'uv run scripts/search.py "rust async"'
WRAPPED = [f"{shell} {opt} '{ALLOWED}'" for shell in ("bash", "sh", "/bin/bash", "/usr/bin/env bash", "zsh", "dash")
           for opt in ("-c", "-lc", "-l -c", "--login -c", "-cl")]


@pytest.mark.parametrize("command", WRAPPED)
@pytest.mark.parametrize(("tool", "shape"), [
    ("bash", lambda c: {"command": c}),                       # OpenCode
    ("run_shell_command", lambda c: {"command": c}),          # Qwen Code
    ("Bash", lambda c: {"command": c}),                       # Claude Code
    ("exec_command", lambda c: {"cmd": c}),                   # Codex: the client wraps cmd itself
    ("run_commands", lambda c: {"commands": [c]}),            # Cline
])
def test_a_shell_typed_into_a_command_string_is_a_wrapper(policy: Policy, tool: str, shape: Any,
                                                          command: str) -> None:
    verdict = judge_call(policy, tool, shape(command))
    assert not verdict.allowed
    assert verdict.reasons[0] == "wrapper", verdict.reasons


@pytest.mark.parametrize("argv", [["bash", "-lc", ALLOWED], ["bash", "-c", ALLOWED], ["/bin/sh", "-c", ALLOWED],
                                  ["uv", "run", "scripts/search.py", "rust async"]])
def test_an_argv_the_client_runs_is_its_command(policy: Policy, argv: list[str]) -> None:
    assert judge_call(policy, "shell", {"command": argv}).allowed  # Codex's `shell {command: argv}`


def test_an_argv_wrapping_a_bad_command_is_judged_by_that_command(policy: Policy) -> None:
    verdict = judge_call(policy, "shell", {"command": ["bash", "-lc", ALLOWED + " | head -5"]})
    assert verdict.reasons[0] == "pipe"


def test_through_the_proxy_the_wrapped_string_is_refused_recorded_and_counted(upstream, proxy) -> None:
    from proxy.testing.scripted_upstream import Reply
    from tests.conftest import chat

    tools = [{"type": "function", "function": {"name": "bash", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
    upstream.script(Reply(tool_calls=[("bash", {"command": f"bash -c '{ALLOWED}'"})]),
                    Reply(tool_calls=[("bash", {"command": ALLOWED})]))
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat(tools=tools), headers={"x-session-id": "ses_w"})
        stats = client.get("/stats/models").json()["models"][0]
    delivered = response.json()["choices"][0]["message"]["tool_calls"]
    assert [json.loads(c["function"]["arguments"]) for c in delivered] == [{"command": ALLOWED}]
    assert "wrapper" in upstream.requests[-1]["messages"][-1]["content"]
    rows = proxy.rows("SELECT decision, primary_reason FROM tool_calls ORDER BY attempt")
    assert [tuple(r) for r in rows] == [("reject", "wrapper"), ("allow", None)]
    assert stats["errors"] == 1 and stats["reasons"] == {"wrapper": 1}
