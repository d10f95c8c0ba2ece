"""Text action formats: commands an agent runs from the assistant's text, not from a tool call.

Some agents offer no tools and act on what the model writes: mini-swe-agent runs a fenced ```mswea_bash_command
block, older configs a fenced ```bash block, Cline/Roo-style clients XML action tags. A text format reads a whole
assistant text into calls of the tool its client's profile maps (`tool-profiles.yaml`: `text-actions`, `cline`),
so they are judged, enforced and recorded like tool calls. What a format recognises but cannot read (a block left
open) is reported, so the proxy counts it as ungoverned instead of letting it pass unseen.

A format is chosen per client (proxy/enforce/text_clients.py), never for every request: text that merely looks
like a command is only an action for a client that runs it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.toolcalls.base import ToolCall, dumps, new_call_id

__all__ = ["NO_CONTEXT", "TEXT_SOURCE", "Stated", "TextActionFormat", "TextActions", "is_text_action", "text_call"]

TEXT_SOURCE = "text:"  # the `source` prefix of a call read from text; the format's name follows


@dataclass(slots=True)
class TextActions:
    """What one format read in one text: its calls, and why a part it recognised could not be read."""

    calls: list[ToolCall] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Stated:
    """What a client's own request states that its formats need to read an answer as the client will: the tools
    its prompt declares (DSPy ReAct: OpenAI function tools), the fence it told the model to write code in and the
    files it has open for editing (aider). Read from the client's request, never from the answer."""

    tools: tuple[dict[str, Any], ...] = ()
    fence: tuple[str, str] = ("```", "```")
    files: tuple[str, ...] = ()


NO_CONTEXT = Stated()


class TextActionFormat(ABC):
    """One way an agent writes an action in text."""

    name: str

    @abstractmethod
    def read(self, text: str, stated: Stated = NO_CONTEXT, pieces: Sequence[str] | None = None) -> TextActions:
        """Every action in `text`, in order, as a client that stated `stated` reads them; `pieces`: the text as the
        chunks the client gets it in (None: whole), for a client whose reading depends on them."""


def text_call(fmt: str, tool: str, arguments: dict[str, object], raw: str, index: int) -> ToolCall:
    """A call read from text: `source` names the text format, `raw` keeps what the model wrote."""
    return ToolCall(name=tool, arguments_text=dumps(arguments), arguments=dict(arguments), source=TEXT_SOURCE + fmt,
                    id=new_call_id(), index=index, raw=raw)


def is_text_action(call: ToolCall) -> bool:
    return call.source.startswith(TEXT_SOURCE)
