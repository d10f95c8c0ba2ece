"""Incremental extraction for one choice of a `chat.completion.chunk` stream.

The proxy's enforcement relays text live and holds back only tool calls, so `feed` returns
text the moment it is known not to belong to a call, and each call once it is complete:
- `reasoning` / `reasoning_content` text is passed through at once and never searched;
- `content` goes through one scanner for the registered content formats (Qwen3-Coder XML and
  Hermes JSON; `<think>` passed through), unless `scan_content=False`; XML is read by `rules`
  (the upstream's vLLM family);
- structured `tool_calls` fragments go to the registered structured format, which assembles them
  per index and completes a call when the next one begins or at `finish()`.
Feeding a text in any pieces gives the same calls and the same joined text as reading it whole.
"""

from __future__ import annotations

from typing import Any

from proxy.toolcalls.base import Event, TextDelta
from proxy.toolcalls.families import XmlRules
from proxy.toolcalls.registry import content_formats, structured_format
from proxy.toolcalls.scanner import ContentScanner
from proxy.toolcalls.schema import tool_schemas

__all__ = ["ChoiceStream"]

_REASONING_FIELDS = frozenset({"reasoning", "reasoning_content"})


class ChoiceStream:
    """Incremental extraction for ONE choice of a chat.completion.chunk stream."""

    __slots__ = ("_content", "_structured")

    def __init__(self, tools: list[dict[str, Any]] | None = None, *, scan_content: bool = True,
                 rules: XmlRules | None = None) -> None:
        schemas = tool_schemas(tools)
        self._content = ContentScanner(content_formats(rules), schemas) if scan_content else None
        self._structured = structured_format().stream(schemas)

    def feed(self, delta: dict[str, Any]) -> list[Event]:
        """Read one `choices[i].delta`; return the text releasable now and the calls now complete."""
        if type(delta) is not dict:
            return []
        # Hot path: nearly every vLLM delta holds one field; go straight to its reader.
        if len(delta) == 1:
            scanner = self._content
            if "content" in delta and scanner is not None:
                value = delta["content"]
                if type(value) is not str or not value:
                    return []
                if scanner.plain and scanner.mark not in value:
                    return [TextDelta("content", value)]  # plain text: released as it stands
                return scanner.feed_text(value)
            if "tool_calls" in delta:
                return self._structured.feed_value(delta["tool_calls"])
        events: list[Event] = []
        for key, value in delta.items():
            if key == "content":
                if isinstance(value, str) and value:
                    if self._content is None:
                        events.append(TextDelta("content", value))
                    else:
                        events += self._content.feed_text(value)
            elif key in _REASONING_FIELDS:
                if isinstance(value, str) and value:
                    events.append(TextDelta(key, value))
            elif key == "tool_calls" and value:
                events += self._structured.feed_value(value)
        return events

    def releases_as_is(self, content: str) -> bool:
        """Whether `feed({"content": content})` would release `content` unchanged and change nothing,
        so that a caller may skip it: non-empty text, and either content is not scanned or the scanner
        holds nothing and the text holds no opener's first character."""
        if not content:
            return False
        return self._content is None or (self._content.plain and self._content.mark not in content)

    def finish(self) -> list[Event]:
        """The choice ended (finish_reason seen, or the stream ended): flush and complete."""
        events = self._content.finish() if self._content is not None else []
        return events + self._structured.finish()
