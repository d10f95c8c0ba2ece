"""Cline/Roo-style XML action tags: `<execute_command><command>ls</command></execute_command>`,
`<read_file><path>a.txt</path></read_file>` ...

Read the way Cline's own parser reads them (`parseAssistantMessageV2` of the `cline` npm package, checked against
the real parser under node by tests/toolcalls/test_cline_parser.py):
- an action opens at `<TOOL>` for a name Cline knows, anywhere in the text, not only at a line's start;
- inside it, `<PARAM>` for any parameter name Cline knows opens a value (whichever tool it is in), which runs to
  the first `</PARAM>`, tags and the tool's own closing tag included, and is trimmed as JavaScript trims;
  a parameter given twice keeps its last value;
- outside a value, `</TOOL>` closes the action; any other text there is ignored;
- `write_to_file`'s `content` is, once the action closes, everything from its first `<content>` to its last
  `</content>` (so a file may hold the tag);
- an action or a value left open at the end is still an action, with what it holds (Cline runs the blocks it
  has when the stream ends).

Where Cline versions read a spelling differently, the action is refused rather than read one way: a
parameter given twice with different values; a scalar parameter whose value holds a tag (newer releases close
it on `</parameter>` or another closer); a tool tag opened where another action is still open (newer releases
close an action on another tool's closer, and the tag then starts an action of its own: both readings are
judged). Such a call carries `error` and is judged `unjudgeable`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from proxy.toolcalls.text_actions import NO_CONTEXT, Stated, TextActionFormat, TextActions, text_call

__all__ = ["CLINE_PARAMS", "CLINE_TOOLS", "JS_WHITESPACE", "ROO_PARAMS", "ROO_TOOLS", "XmlActionTags"]

# The tool names of Cline's XML protocol over its releases (the union: a name one release knows is an action
# there), and its parameter names.
CLINE_TOOLS = (
    "execute_command", "read_file", "write_to_file", "replace_in_file", "search_files", "list_files",
    "list_code_definition_names", "browser_action", "use_mcp_tool", "access_mcp_resource",
    "ask_followup_question", "plan_mode_respond", "act_mode_respond", "load_mcp_documentation",
    "attempt_completion", "new_task", "condense", "summarize_task", "report_bug", "new_rule", "web_fetch",
    "web_search", "focus_chain", "apply_patch", "generate_explanation", "use_skill", "use_subagents",
)
CLINE_PARAMS = (
    "command", "requires_approval", "path", "absolutePath", "content", "diff", "regex", "file_pattern",
    "recursive", "action", "url", "coordinate", "text", "query", "allowed_domains", "blocked_domains", "prompt",
    "server_name", "tool_name", "arguments", "uri", "question", "options", "response", "result", "context",
    "title", "what_happened", "steps_to_reproduce", "api_request_output", "additional_context",
    "needs_more_exploration", "task_progress", "timeout", "input", "from_ref", "to_ref", "skill_name",
    "prompt_1", "prompt_2", "prompt_3", "prompt_4", "prompt_5", "start_line", "end_line",
)
# Roo Code's (and Kilo Code's legacy) XML protocol: Cline's grammar, with names of its own.
ROO_TOOLS = (
    "execute_command", "read_file", "write_to_file", "apply_diff", "insert_content", "search_and_replace",
    "search_files", "list_files", "list_code_definition_names", "browser_action", "use_mcp_tool",
    "access_mcp_resource", "ask_followup_question", "attempt_completion", "switch_mode", "new_task",
    "fetch_instructions", "codebase_search", "update_todo_list", "run_slash_command", "generate_image",
    "list_modes", "skill", "apply_patch", "edit_file", "search_replace",
)
ROO_PARAMS = (
    "command", "path", "content", "line_count", "regex", "file_pattern", "recursive", "action", "url",
    "coordinate", "text", "server_name", "tool_name", "arguments", "uri", "question", "result", "diff", "mode_slug",
    "reason", "line", "mode", "message", "cwd", "follow_up", "task", "size", "query", "queries", "args", "skill",
    "start_line", "end_line", "todos", "prompt", "image", "operations", "patch", "file_path", "old_string",
    "new_string", "replace_all", "expected_replacements", "artifact_id", "search", "replace", "use_regex",
    "ignore_case", "offset", "limit", "indentation", "anchor_line", "max_levels", "include_siblings",
    "include_header", "max_lines", "files", "line_ranges",
)
# Values that carry free text (a file, a patch, prose): a tag inside them is text in every release.
_FREE_TEXT = frozenset({"content", "diff", "input", "result", "response", "question", "context", "text", "args",
                        "todos", "message", "task", "follow_up", "search", "replace", "old_string", "new_string",
                        "patch", "operations",
                        "task_progress", "what_happened", "steps_to_reproduce", "additional_context",
                        "api_request_output", "arguments", "options", "prompt", "prompt_1", "prompt_2",
                        "prompt_3", "prompt_4", "prompt_5"})
# String.prototype.trim: ECMAScript WhiteSpace and LineTerminator (Python's strip() differs: \x1c-\x1f, \x85
# are stripped by Python only, U+FEFF by JavaScript only).
JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
                "\u2028\u2029\u202f\u205f\u3000\ufeff"
_TAG = re.compile(r"</?[A-Za-z_][A-Za-z0-9_-]*>")


@dataclass(slots=True)
class _Action:
    tool: str
    start: int  # where its opening tag starts
    body: int  # where its content starts (after the opening tag)
    params: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    end: int | None = None  # after its closing tag; None while open


class XmlActionTags(TextActionFormat):
    """Tags named by `tools`, each a call of that tool with its parameter tags as arguments."""

    def __init__(self, name: str, tools: tuple[str, ...] = CLINE_TOOLS, params: tuple[str, ...] = CLINE_PARAMS) -> None:
        self.name, self.tools, self.params = name, tools, params
        self._open_tool = re.compile(f"<({'|'.join(re.escape(t) for t in tools)})>")
        self._in_tool = re.compile(f"<({'|'.join(re.escape(p) for p in params)})>"
                                   f"|</({'|'.join(re.escape(t) for t in tools)})>")

    def read(self, text: str, stated: Stated = NO_CONTEXT, pieces: Sequence[str] | None = None) -> TextActions:
        found = TextActions()
        values: list[tuple[int, int]] = []  # where the parameter values of the actions read lie
        read_at: set[int] = set()
        position = 0
        while (opened := self._open_tool.search(text, position)) is not None:
            action = self._action(text, opened, values)
            self._add(found, text, action, read_at)
            if action.end is None:
                found.unreadable.append(f"an unclosed <{action.tool}> tag")
                break
            position = action.end
        # A tool tag inside an action but outside its values: text to this release, an action of its own to
        # releases that close an action on another closer. Both readings are judged.
        for opened in self._open_tool.finditer(text):
            if opened.start() in read_at or any(start <= opened.start() < end for start, end in values):
                continue
            action = self._action(text, opened, [])
            action.problems.append(f"<{action.tool}> opened inside another action: Cline releases read it "
                                   "differently")
            self._add(found, text, action, read_at)
        return found

    def _add(self, found: TextActions, text: str, action: _Action, read_at: set[int]) -> None:
        read_at.add(action.start)
        raw = text[action.start:action.end if action.end is not None else len(text)]
        runs: list[tuple[str, dict[str, object]]] = [(action.tool, dict(action.params)), *_also_runs(action)]
        for tool, arguments in runs:
            call = text_call(self.name, tool, arguments, raw, len(found.calls))
            if action.problems:
                call.error = "; ".join(action.problems)
            found.calls.append(call)

    def _action(self, text: str, opened: re.Match[str], values: list[tuple[int, int]]) -> _Action:
        """One action from its opening tag, as Cline's parser reads it; its values' places added to `values`."""
        action = _Action(opened.group(1), opened.start(), opened.end())
        closer = f"</{action.tool}>"
        position = action.body
        while (tag := self._next_tag(text, position, closer)) is not None:
            if tag.group(0) == closer:
                action.end = tag.end()
                self._content_of_a_file(text, action, tag.start())
                break
            param = tag.group(1)
            value_end = text.find(f"</{param}>", tag.end())
            stop = value_end if value_end >= 0 else len(text)
            values.append((tag.end(), stop))
            self._keep(action, param, text[tag.end():stop].strip(JS_WHITESPACE))
            if value_end < 0:
                break
            position = value_end + len(param) + 3
        return action

    def _next_tag(self, text: str, position: int, closer: str) -> re.Match[str] | None:
        """The next parameter opening tag, or this action's closing tag, from `position`."""
        while (tag := self._in_tool.search(text, position)) is not None:
            if tag.group(1) is not None or tag.group(0) == closer:
                return tag
            position = tag.start() + 1  # another tool's closer: text to this release
        return None

    @staticmethod
    def _keep(action: _Action, param: str, value: str) -> None:
        earlier = action.params.get(param)
        if earlier is not None and earlier != value:
            action.problems.append(f"<{param}> given twice with different values")
        if param not in _FREE_TEXT and _TAG.search(value):
            action.problems.append(f"<{param}> holds a tag, which Cline releases close differently")
        action.params[param] = value

    @staticmethod
    def _content_of_a_file(text: str, action: _Action, closing: int) -> None:
        if action.tool != "write_to_file":
            return
        inner = text[action.body:closing]
        first, last = inner.find("<content>"), inner.rfind("</content>")
        if first != -1 and last > first:
            action.params["content"] = inner[first + len("<content>"):last].strip(JS_WHITESPACE)


def _also_runs(action: _Action) -> list[tuple[str, dict[str, object]]]:
    """What an action runs besides itself, as calls the policy knows how to judge: `attempt_completion`'s
    optional demo `command` runs in the shell; `use_mcp_tool` calls the MCP server's tool with the JSON of
    `arguments` (judged by what its values hold, as a tool no profile describes)."""
    params = action.params
    if action.tool == "attempt_completion" and params.get("command"):
        return [("execute_command", {"command": params["command"]})]
    if action.tool == "use_mcp_tool":
        try:
            arguments = json.loads(params.get("arguments") or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            action.problems.append("use_mcp_tool's <arguments> is not a JSON object")
            return []
        return [(f"mcp:{params.get('server_name', '')}/{params.get('tool_name', '')}", arguments)]
    return []
