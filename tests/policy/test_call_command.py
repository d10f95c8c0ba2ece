"""The command a call carries, read once (`call_command`) for the feedback, the block message, the record and the
log: the judge's reading of every profiled shell argument shape, None for anything else, never an exception."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.enforce.feedback_turns import blocked_message
from proxy.policy import LoadedPolicy, judge_call, load_policy_file
from proxy.policy.judge import call_command
from proxy.record import JudgedCall, RequestRecord, SessionRef, shown_call
from proxy.toolcalls.openai import structured_call
from tests.conftest import STRICT_POLICY

PIPE = "uv run scripts/search.py x | head -5"


@pytest.fixture(scope="module")
def shipped() -> LoadedPolicy:
    return load_policy_file(STRICT_POLICY)


@pytest.mark.parametrize("tool, arguments, command", [
    ("bash", {"command": PIPE}, PIPE),  # OpenCode
    ("run_shell_command", {"command": PIPE, "directory": "docs"}, PIPE),  # Qwen Code
    ("shell", {"command": ["bash", "-lc", PIPE]}, PIPE),  # Codex's argv, unwrapped as the judge reads it
    ("read", {"filePath": "/etc/passwd"}, None),  # a tool with no shell argument
    ("nosuchtool", {"command": PIPE}, None),
])
def test_the_judge_reading(shipped: LoadedPolicy, tool: str, arguments: dict[str, Any], command: str | None) -> None:
    assert call_command(shipped.policy, tool, arguments) == command


@pytest.mark.parametrize("arguments", [
    None, "ls", 42, [PIPE], {"command": None}, {"command": 7}, {"command": {"nested": PIPE}}, {"command": [1, 2]},
    {"command": "x" * 200_000}, {"command": "\x00\ud800"}, {},
])
def test_arguments_it_cannot_read_give_none_never_an_error(shipped: LoadedPolicy, arguments: Any) -> None:
    for tool in ("bash", "shell", "run_shell_command", "read"):
        command = call_command(shipped.policy, tool, arguments)
        assert command is None or isinstance(command, str)


def test_feedback_block_message_and_record_show_the_same_command(shipped: LoadedPolicy) -> None:
    arguments = {"command": ["bash", "-lc", PIPE]}
    call = structured_call(name="shell", arguments=arguments, call_id="c1", index=0)
    judged = [JudgedCall(call, judge_call(shipped.policy, "shell", arguments))]
    assert shown_call(shipped.policy, call) == PIPE
    assert f"`{PIPE}`" in blocked_message(shipped, judged, attempts=3)
    record = RequestRecord(session=SessionRef("s", "header", True), model="m", route="chat", upstream="u",
                           stream=False, concurrency=1)
    record.note_blocked(judged, shipped.policy)
    assert record.blocked == [{"tool": "shell", "reasons": list(judged[0].verdict.reasons), "call": PIPE}]


def test_a_call_without_a_command_is_shown_by_its_tool_and_arguments(shipped: LoadedPolicy) -> None:
    call = structured_call(name="read", arguments={"filePath": "/etc/passwd"}, call_id="c1", index=0)
    assert shown_call(shipped.policy, call) == 'read {"filePath": "/etc/passwd"}'
