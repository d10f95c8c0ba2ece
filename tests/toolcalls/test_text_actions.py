"""The text action formats: each reads its actions, in order, and reports what it recognises but cannot read."""

from __future__ import annotations

import pytest

from proxy.toolcalls.registry import TEXT_FORMATS

MSWEA = TEXT_FORMATS["mswea_bash_command"]
BASH = TEXT_FORMATS["bash_block"]
CLINE = TEXT_FORMATS["cline_xml"]


def _commands(fmt, text):
    return [(c.name, c.arguments) for c in fmt.read(text).calls]


def test_a_fenced_block_is_one_command():
    text = "THOUGHT: list\n\n```mswea_bash_command\nls -la | head\n```\n"
    assert _commands(MSWEA, text) == [("mswea_bash_command", {"command": "ls -la | head"})]
    (call,) = MSWEA.read(text).calls
    assert call.source == "text:mswea_bash_command" and call.raw.startswith("```mswea_bash_command")


def test_every_block_is_read_as_the_client_reads_it():
    # mini-swe-agent's regex: an opener anywhere, the body up to the first newline + three backticks.
    text = "```bash\necho a\n```\nthen```sh\necho b\n```python\nrm -rf /\n```\n"
    assert [a["command"] for _, a in _commands(BASH, text)] == ["echo a", "echo b"]


def test_an_opener_inside_a_line_is_still_an_action():
    text = "Sure thing```mswea_bash_command \nrm -rf ~\n```"
    assert _commands(MSWEA, text) == [("mswea_bash_command", {"command": "rm -rf ~"})]


@pytest.mark.parametrize("text", ["```mswea_bash_command\nrm -rf /\n", "x\n```mswea_bash_command\nls\n``",
                                  "```mswea_bash_command\nls\n```\n```mswea_bash_command\nrm -rf /"])
def test_an_unclosed_block_is_unreadable(text):
    assert MSWEA.read(text).unreadable


def test_other_languages_are_not_actions():
    assert _commands(BASH, "```python\nprint(1)\n```") == []
    assert _commands(MSWEA, "```bash\nls\n```") == []


def test_cline_tags_are_calls_of_the_cline_tools():
    text = ("I will look.\n<execute_command>\n<command>cat a | tail</command>\n"
            "<requires_approval>false</requires_approval>\n</execute_command>\n<read_file><path>/etc/passwd</path>"
            "</read_file>")
    assert _commands(CLINE, text) == [("execute_command", {"command": "cat a | tail", "requires_approval": "false"}),
                                      ("read_file", {"path": "/etc/passwd"})]


@pytest.mark.parametrize("text", ["<execute_command><command>ls</command>",
                                  "<execute_command><command>ls</execute_command>"])
def test_an_open_tag_is_unreadable(text):
    assert CLINE.read(text).unreadable
