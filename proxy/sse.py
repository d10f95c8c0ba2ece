"""Server-sent events: an incremental decoder that keeps each event's exact bytes, and encoders."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["DONE", "SSEDecoder", "SSEEvent", "encode_data", "encode_json"]

DONE = b"data: [DONE]\n\n"
_SEPARATORS = (b"\r\n\r\n", b"\n\n", b"\r\r")


@dataclass(slots=True)
class SSEEvent:
    raw: bytes  # the event exactly as received, terminator included
    data: str | None  # the joined `data:` lines, None for comment-only events
    event: str | None = None

    @property
    def is_done(self) -> bool:
        return self.data is not None and self.data.strip() == "[DONE]"


class SSEDecoder:
    """Splits a byte stream into events whatever the chunk boundaries (even inside a UTF-8 character)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not self._buffer and _one_whole_event(chunk):
            return [_parse(bytes(chunk))]  # the usual read from vLLM: nothing to buffer or search
        self._buffer += chunk
        events: list[SSEEvent] = []
        buffer = self._buffer
        # vLLM ends events with a bare "\n\n"; the other separators are looked for only when a CR shows up.
        separators = _SEPARATORS if b"\r" in buffer else (b"\n\n",)
        start = 0
        while True:
            end = -1
            sep_len = 0
            for sep in separators:
                pos = buffer.find(sep, start)
                if pos != -1 and (end == -1 or pos < end):
                    end, sep_len = pos, len(sep)
            if end == -1:
                break
            events.append(_parse(bytes(buffer[start: end + sep_len])))
            start = end + sep_len
        if start:
            del buffer[:start]
        return events

    def close(self) -> list[SSEEvent]:
        """What remains when the stream ends without a final blank line."""
        if not self._buffer.strip():
            self._buffer.clear()
            return []
        raw = bytes(self._buffer)
        self._buffer.clear()
        return [_parse(raw)]


def _one_whole_event(chunk: bytes) -> bool:
    """Whether `chunk` is exactly one event ended by a bare "\\n\\n", as vLLM writes each event."""
    return chunk.endswith(b"\n\n") and chunk.find(b"\n\n") == len(chunk) - 2 and b"\r" not in chunk


def _parse(raw: bytes) -> SSEEvent:
    if raw.startswith(b"data: ") and raw.count(b"\n") == 2 and raw.endswith(b"\n\n"):
        return SSEEvent(raw=raw, data=raw[6:-2].decode("utf-8", errors="replace"))  # the usual one-line event
    text = raw.decode("utf-8", errors="replace")
    data_lines: list[str] = []
    event: str | None = None
    for line in text.splitlines():
        if line.startswith("data:"):
            value = line[5:]
            data_lines.append(value[1:] if value.startswith(" ") else value)
        elif line.startswith("event:"):
            event = line[6:].strip()
    return SSEEvent(raw=raw, data="\n".join(data_lines) if data_lines else None, event=event)


def encode_data(data: str) -> bytes:
    return b"data: " + data.encode("utf-8") + b"\n\n"


def encode_json(obj: Any) -> bytes:
    return encode_data(json.dumps(obj, ensure_ascii=False, separators=(", ", ": ")))
