"""Fenced code blocks a client runs as shell commands: ```mswea_bash_command (mini-swe-agent's text config),
```bash / ```sh (configs that execute bash blocks).

A block opens with a line of three or more backticks and the info string, and closes with a line of at least as
many backticks (CommonMark's rule, which the clients' regexes follow for well-formed blocks). A block opened but
never closed is unreadable: the client may still run what it finds, so it is counted, not ignored.
"""

from __future__ import annotations

import re

from proxy.toolcalls.text_actions import TextActionFormat, TextActions, text_call

__all__ = ["FencedBlocks"]


class FencedBlocks(TextActionFormat):
    """Blocks whose info string is one of `languages`, each a call of `tool` with `{"command": body}`."""

    def __init__(self, name: str, languages: tuple[str, ...], tool: str) -> None:
        self.name, self.languages, self.tool = name, languages, tool
        names = "|".join(re.escape(language) for language in languages)
        self._open = re.compile(rf"^[ \t]{{0,3}}(`{{3,}})[ \t]*(?:{names})[ \t]*$", re.MULTILINE)

    def read(self, text: str) -> TextActions:
        found = TextActions()
        position = 0
        while (opened := self._open.search(text, position)) is not None:
            fence = opened.group(1)
            close = re.compile(rf"^[ \t]{{0,3}}`{{{len(fence)},}}[ \t]*$", re.MULTILINE)
            closed = close.search(text, opened.end())
            if closed is None:
                found.unreadable.append(f"an unclosed ```{self.languages[0]} block")
                break
            body = text[opened.end():closed.start()].strip("\n")
            raw = text[opened.start():closed.end()]
            found.calls.append(text_call(self.name, self.tool, {"command": body}, raw, len(found.calls)))
            position = closed.end()
        return found
