"""Cline/Roo-style XML action tags: `<execute_command><command>ls</command></execute_command>`,
`<read_file><path>a.txt</path></read_file>` ...

Each tag names a tool of the client's profile (`cline` in tool-profiles.yaml); its child tags are the
arguments, their text taken verbatim (the clients do not decode entities). An action tag opened but not closed,
or a child left open, is unreadable.
"""

from __future__ import annotations

import re

from proxy.toolcalls.text_actions import TextActionFormat, TextActions, text_call

__all__ = ["XmlActionTags"]

_CHILD = re.compile(r"<([a-z_]+)>(.*?)</\1>", re.DOTALL)


class XmlActionTags(TextActionFormat):
    """Tags named by `tools`, each a call of that tool with its child tags as arguments."""

    def __init__(self, name: str, tools: tuple[str, ...]) -> None:
        self.name, self.tools = name, tools
        names = "|".join(re.escape(tool) for tool in tools)
        self._open = re.compile(rf"<({names})>")

    def read(self, text: str) -> TextActions:
        found = TextActions()
        position = 0
        while (opened := self._open.search(text, position)) is not None:
            tool = opened.group(1)
            end = text.find(f"</{tool}>", opened.end())
            if end < 0:
                found.unreadable.append(f"an unclosed <{tool}> tag")
                break
            inner = text[opened.end():end]
            arguments = {m.group(1): m.group(2).strip("\n") for m in _CHILD.finditer(inner)}
            if _CHILD.sub("", inner).strip():  # a child tag left open, or text the client may read otherwise
                found.unreadable.append(f"<{tool}> holds text outside its argument tags")
            raw = text[opened.start():end + len(tool) + 3]
            found.calls.append(text_call(self.name, tool, arguments, raw, len(found.calls)))
            position = end + len(tool) + 3
        return found
