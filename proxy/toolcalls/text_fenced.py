"""Fenced code blocks a client runs as shell commands: ```mswea_bash_command (mini-swe-agent's text config),
```bash / ```sh / ```shell (configs that execute bash blocks).

Read as the clients read them (mini-swe-agent: `re.findall(r"```mswea_bash_command\\s*\\n(.*?)\\n```", DOTALL)`,
each action stripped): an opener anywhere in the text, not only at a line's start, and the body up to the first
newline followed by three backticks, whatever follows them. A block opened but never closed is unreadable: it is
counted, not ignored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from proxy.toolcalls.text_actions import NO_CONTEXT, Stated, TextActionFormat, TextActions, text_call

__all__ = ["FencedBlocks"]


class FencedBlocks(TextActionFormat):
    """Blocks whose info string is one of `languages`, each a call of `tool` with `{"command": body}`."""

    def __init__(self, name: str, languages: tuple[str, ...], tool: str) -> None:
        self.name, self.languages, self.tool = name, languages, tool
        names = "|".join(re.escape(language) for language in languages)
        self._block = re.compile(rf"```(?:{names})\s*\n(.*?)\n```", re.DOTALL)
        self._opener = re.compile(rf"```(?:{names})\s*\n")

    def read(self, text: str, stated: Stated = NO_CONTEXT, pieces: Sequence[str] | None = None) -> TextActions:
        found = TextActions()
        end = 0
        for match in self._block.finditer(text):
            found.calls.append(text_call(self.name, self.tool, {"command": match.group(1).strip()}, match.group(0),
                                         len(found.calls)))
            end = match.end()
        if self._opener.search(text, end):
            found.unreadable.append(f"an unclosed ```{self.languages[0]} block")
        return found
