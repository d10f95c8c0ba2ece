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


def test_cline_values_are_trimmed_as_javascript_trims():
    text = "<execute_command><command>\u00a0\ufeff rm -rf / \u2028</command></execute_command>"
    assert _commands(CLINE, text) == [("execute_command", {"command": "rm -rf /"})]


def test_an_unclosed_cline_action_is_still_judged():
    (call,) = CLINE.read("<execute_command><command>rm -rf /").calls
    assert call.arguments == {"command": "rm -rf /"} and call.error is None


@pytest.mark.parametrize("text", [
    "<execute_command><command>ls</command><command>rm -rf /</command></execute_command>",  # twice, differing
    "<read_file><path>a.txt</parameter><path>/etc/passwd</path></read_file>",  # a tag in a scalar value
    "<read_file><path>a</path></foo><execute_command><command>rm -rf /</command></execute_command>",  # nested tool
])
def test_spellings_cline_releases_read_differently_are_refused(text):
    assert any(call.error for call in CLINE.read(text).calls)


def test_what_an_action_also_runs_is_judged_as_such():
    text = ("<attempt_completion><result>done</result><command>open index.html</command></attempt_completion>"
            "<use_mcp_tool><server_name>fs</server_name><tool_name>write</tool_name>"
            "<arguments>{\"path\": \"/etc/x\"}</arguments></use_mcp_tool>")
    assert _commands(CLINE, text)[1:2] == [("execute_command", {"command": "open index.html"})]
    assert _commands(CLINE, text)[3] == ("mcp:fs/write", {"path": "/etc/x"})
    bad = "<use_mcp_tool><server_name>fs</server_name><arguments>not json</arguments></use_mcp_tool>"
    assert all(call.error for call in CLINE.read(bad).calls)


def test_roo_tags_are_read_with_roos_names():
    roo = TEXT_FORMATS["roo_xml"]
    text = ("<apply_diff><path>.git/hooks/pre-commit</path><diff>x</diff></apply_diff>"
            "<execute_command><command>uv run scripts/search.py x</command><cwd>/etc</cwd></execute_command>")
    assert _commands(roo, text) == [("apply_diff", {"path": ".git/hooks/pre-commit", "diff": "x"}),
                                    ("execute_command", {"command": "uv run scripts/search.py x", "cwd": "/etc"})]
    assert _commands(CLINE, text)[0] == ("execute_command", {"command": "uv run scripts/search.py x"})
