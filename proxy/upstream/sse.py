"""Server-sent events: an incremental decoder that follows the WHATWG event-stream rules and keeps each
event's exact bytes, and the encoders.

The rules (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
lines end with CR, LF or CRLF; one UTF-8 byte-order mark may open the stream; `data:` lines (the space
after the colon is optional) join with LF; a line starting with `:` is a comment; a blank line ends the
event. The decoder is stricter than the rules in one way: a `data` that is not valid UTF-8 is not
replaced but marked `invalid`, so that enforce mode refuses it instead of judging one text while a
client reads another. It is more lenient in one: a last event without its blank line is still returned
on `close()`, because some clients dispatch it too and the proxy must have judged whatever they may run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["DONE", "SSEDecoder", "SSEEvent", "encode_data", "encode_json"]

DONE = b"data: [DONE]\n\n"
_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(kw_only=True, slots=True)
class SSEEvent:
    raw: bytes  # the event exactly as received, terminator included
    data: str | None  # the joined `data` lines, None for an event without any (comments, blank lines)
    event: str | None = None
    invalid: str | None = None  # why the event cannot be read (its data is not UTF-8); data is None then
    plain: bool = False  # raw is exactly b"data: " + data + b"\n\n": the framing every reader agrees on
    comment: bool = False  # the event holds a comment line (keep-alives)

    @property
    def is_done(self) -> bool:
        return self.data is not None and self.data.strip() == "[DONE]"


class SSEDecoder:
    """Splits a byte stream into events whatever the chunk boundaries (even inside a UTF-8 character or
    between the CR and LF of one line end)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._start = True  # nothing read yet: a byte-order mark may come
        self._raw: list[bytes] = []  # the lines (with their ends) of the event being read
        self._data: list[bytes] = []
        self._event: bytes | None = None
        self._comment = False

    def between_events(self) -> bool:
        """Nothing of an event is held: the next byte read starts one."""
        return not self._buffer and not self._raw and not self._start

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not self._buffer and not self._raw and _one_plain_event(chunk):
            self._start = False
            return [_plain(chunk)]  # the usual read from vLLM: nothing to buffer or search
        self._buffer += chunk
        return self._lines(final=False)

    def close(self) -> list[SSEEvent]:
        """What remains when the stream ends without a final blank line."""
        events = self._lines(final=True)
        if self._buffer:  # a last line without its end
            line = bytes(self._buffer)
            self._buffer.clear()
            self._raw.append(line)
            self._field(line)
        if self._raw:
            if any(part.strip() for part in self._raw):
                events.append(self._dispatch())
            else:
                self._reset()
        return events

    def _lines(self, *, final: bool) -> list[SSEEvent]:
        buffer = self._buffer
        if self._start:
            if not final and len(buffer) < len(_BOM) and _BOM.startswith(bytes(buffer)):
                return []  # maybe the start of a byte-order mark
            self._start = False
            if buffer.startswith(_BOM):
                self._raw.append(_BOM)
                del buffer[:len(_BOM)]
        events: list[SSEEvent] = []
        pos, end = 0, len(buffer)
        while True:
            match = _LINE_END.search(buffer, pos)
            if match is None or (not final and match.end() == end and buffer[end - 1] == 0x0D):
                break  # no whole line left, or a CR that may be the first half of a CRLF
            line = bytes(buffer[pos:match.start()])
            self._raw.append(bytes(buffer[pos:match.end()]))
            pos = match.end()
            if line:
                self._field(line)
            else:
                events.append(self._dispatch())
        if pos:
            del buffer[:pos]
        return events

    def _field(self, line: bytes) -> None:
        if line[:1] == b":":
            self._comment = True
            return
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value
        # `id`, `retry` and unknown fields carry nothing the proxy or a client reads as output.

    def _dispatch(self) -> SSEEvent:
        raw = b"".join(self._raw)
        data = b"\n".join(self._data) if self._data else None
        name, comment = self._event, self._comment
        self._reset()
        try:
            text = data.decode("utf-8") if data is not None else None
            event = name.decode("utf-8") if name is not None else None
        except UnicodeDecodeError as exc:
            return SSEEvent(raw=raw, data=None, invalid=f"an event that is not UTF-8 (byte {exc.start})",
                            comment=comment)
        plain = data is not None and event is None and raw == b"data: " + data + b"\n\n"
        return SSEEvent(raw=raw, data=text, event=event, plain=plain, comment=comment)

    def _reset(self) -> None:
        self._raw = []
        self._data = []
        self._event = None
        self._comment = False


def _one_plain_event(chunk: bytes) -> bool:
    """Whether `chunk` is exactly one `data: ...` line ended by a bare "\\n\\n", as vLLM writes each event."""
    return chunk.startswith(b"data: ") and chunk.endswith(b"\n\n") and chunk.find(b"\n") == len(chunk) - 2 \
        and b"\r" not in chunk


def _plain(raw: bytes) -> SSEEvent:
    raw = bytes(raw)  # a bytearray or memoryview read becomes the immutable event
    try:
        return SSEEvent(raw=raw, data=raw[6:-2].decode("utf-8"), plain=True)
    except UnicodeDecodeError as exc:
        return SSEEvent(raw=raw, data=None, invalid=f"an event that is not UTF-8 (byte {exc.start - 6})")


def encode_data(data: str) -> bytes:
    return b"data: " + data.encode("utf-8") + b"\n\n"


def encode_json(obj: Any) -> bytes:
    return encode_data(json.dumps(obj, ensure_ascii=False, separators=(", ", ": ")))
