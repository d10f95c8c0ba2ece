"""Finding tool calls in a model's content text, whole or fed in arbitrary pieces.

One scanner reads the text for every content format at once: it cuts the text into plain text,
`<think>` reasoning, and calls. Each format declares where its calls start (`ContentFormat.openers`,
any characters) and its `priority`. Formats that read the shared wrapper tag, `<tool_call>`, are
handed each complete block in priority order until one claims it (Hermes: a JSON object;
Qwen3-Coder, the catch-all: `<function=...>`); any other opener is its format's own bare tag, which
opens a call without the wrapper (Qwen3-Coder's `<function=`). The grammar the scanner follows is
built from the formats it is given (`proxy.toolcalls.registry` gives it the registered ones).

Grammar (outside a call):
- `<think>` ... `</think>` is text: released to the client, never searched for calls;
- `<tool_call>` opens a block that runs to the first `</tool_call>` (or the end of the text);
- a format's bare tag opens a call that runs to the first of that format's closers (or the end);
- where openers of two formats start at one position, the higher priority's is read.
Text between calls that is only whitespace is dropped (vLLM's stream skips it too); every other
piece of text outside calls is content, in order.

Streaming: text is released as soon as it cannot be the start of a tag; only a trailing proper
prefix of a tag (`<tool_`, `</thi`) is held until the next piece decides it. Text without any
opener's first character is released without a look (the hot path). A call's text is
never released. Whole-text extraction is the same scanner fed once, so the two cannot drift; the
tests feed every text split at every offset to prove the cut never matters.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from proxy.toolcalls.base import (
    CompletedCall,
    Event,
    ExtractionResult,
    FormatStream,
    Schemas,
    TextDelta,
    ToolCall,
    ToolCallFormat,
    new_call_id,
)

if TYPE_CHECKING:
    from proxy.toolcalls.families import XmlRules

__all__ = ["TOOL_CALL_END", "TOOL_CALL_START", "ContentFormat", "ContentScanner", "message_text"]

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
THINK_START = "<think>"
THINK_END = "</think>"

_TEXT, _THINK, _CALL = 0, 1, 2


class ContentFormat(ToolCallFormat):
    """A format whose calls travel inside the content text.

    It declares where its calls start, `openers`: markers of any characters. `TOOL_CALL_START` among
    them means the format reads `<tool_call>` blocks, the wrapper the formats share (`claims`, then
    `parse_block`); any other opener is its own bare tag, whose call runs to the first of
    `bare_closers` and is read by `parse_bare`. Where two formats could take the same text (one
    block, one opener, or two openers starting at one position), the higher `priority` wins.
    """

    field: ClassVar[str] = "content"
    priority: ClassVar[int] = 0
    openers: ClassVar[tuple[str, ...]] = (TOOL_CALL_START,)
    bare_closers: tuple[str, ...] = ()  # an instance may narrow these: not a ClassVar

    def for_rules(self, rules: XmlRules) -> ContentFormat:
        """This format as the upstream's vLLM family reads it (the same, unless the format depends on it)."""
        return self

    def claims(self, body: str) -> bool:
        """Is this `<tool_call>` block body written in this format?"""
        return False

    def block_closes(self, body: str) -> bool:
        """Does a `</tool_call>` after `body` end the block? (vLLM's 0.24+ engine reads it as text
        while a function is open.)"""
        return True

    def parse_block(self, body: str, *, closed: bool, schemas: Schemas) -> list[ToolCall]:
        """The calls of one `<tool_call>` block body (`closed`: its `</tool_call>` was seen)."""
        raise NotImplementedError(f"{self.name} reads no <tool_call> block")

    def parse_bare(self, body: str, *, closer: str | None, schemas: Schemas) -> list[ToolCall]:
        """The call opened by a bare tag; `body` is the text after the tag, `closer` what ended it."""
        raise NotImplementedError(f"{self.name} has no bare tag")

    def extract(self, message: dict[str, Any], schemas: Schemas) -> ExtractionResult:
        return scan_text(message_text(message), (self,), schemas)

    def stream(self, schemas: Schemas) -> ContentScanner:
        return ContentScanner((self,), schemas)


@dataclass(frozen=True, slots=True)
class _Grammar:
    """What the scanner looks for, built once per set of formats from what they declare."""

    block_formats: tuple[ContentFormat, ...]  # those reading `<tool_call>` blocks, by priority
    bare: dict[str, ContentFormat]  # a bare tag -> the format it opens
    openers: tuple[str, ...]  # every tag that leaves plain text, by priority
    # A call's opener -> its closers, how many trailing characters may hold a split one, and the
    # character every closer ends with ("" when they differ).
    closing: dict[str, tuple[tuple[str, ...], int, str]]
    mark: str  # the one character every opener starts with; "" when they differ
    opening: re.Pattern[str]  # any opener's first character

    def find_opening(self, text: str, pos: int) -> int:
        found = self.opening.search(text, pos)
        return found.start() if found is not None else -1


@functools.lru_cache(maxsize=64)  # one per family and flavour: a handful
def _grammar(formats: tuple[ContentFormat, ...], read_think: bool) -> _Grammar:
    ranked = sorted(formats, key=lambda fmt: -fmt.priority)  # stable: ties keep the given order
    bare: dict[str, ContentFormat] = {}
    openers: list[str] = [] if read_think else [THINK_START]
    for fmt in ranked:
        for tag in fmt.openers:
            if tag in openers:
                continue  # taken by a format of higher priority
            openers.append(tag)
            if tag != TOOL_CALL_START:
                bare[tag] = fmt
    closing = {tag: fmt.bare_closers for tag, fmt in bare.items()}
    if TOOL_CALL_START in openers:
        closing[TOOL_CALL_START] = (TOOL_CALL_END,)
    firsts = sorted({tag[0] for tag in openers})
    return _Grammar(
        block_formats=tuple(fmt for fmt in ranked if TOOL_CALL_START in fmt.openers),
        bare=bare,
        openers=tuple(openers),
        closing={tag: (closers, max(map(len, closers), default=1) - 1, _common_end(closers))
                 for tag, closers in closing.items()},
        mark=firsts[0] if len(firsts) == 1 else "",
        opening=re.compile("[" + "".join(map(re.escape, firsts)) + "]" if firsts else "(?!)"),  # (?!): none
    )


def message_text(message: dict[str, Any]) -> str:
    """The content text of a message or delta (a string, or a list of text parts)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def scan_text(text: str, formats: Sequence[ContentFormat], schemas: Schemas, *,
              read_think: bool = False) -> ExtractionResult:
    scanner = ContentScanner(formats, schemas, read_think=read_think)
    result = ExtractionResult(content="")
    pieces: list[str] = []
    for event in scanner.feed_text(text) + scanner.finish():
        if isinstance(event, TextDelta):
            pieces.append(event.text)
        else:
            result.add(event.call)
    result.content = "".join(pieces)
    return result


def _common_end(closers: tuple[str, ...]) -> str:
    ends = {closer[-1] for closer in closers}
    return ends.pop() if len(ends) == 1 else ""


class ContentScanner(FormatStream):
    """Incremental scanner over the content text of one choice."""

    def __init__(self, formats: Sequence[ContentFormat], schemas: Schemas, *, read_think: bool = False) -> None:
        """`read_think`: `<think>` is text like any other, searched for calls too (raw completions: a client
        that does not know `<think>` runs the calls written inside it)."""
        self._grammar = _grammar(tuple(formats), read_think)
        # Plain text without this character is content as it stands ("" when the openers start with
        # different characters: then every piece is searched). ChoiceStream checks it without a call.
        self.mark = self._grammar.mark
        self._schemas = schemas
        self._calls = 0  # content calls so far: the `index` of the next one
        self._reset()

    def _reset(self) -> None:
        # True when the next piece, if it holds no opener's first character, is content as it stands
        # (nothing held, not in a call or <think>): the hot path, which ChoiceStream checks too.
        self.plain = True
        self._state = _TEXT
        self._held = ""  # text/think: a possible tag prefix not yet released
        self._after_call = False  # text since the last call is still only whitespace
        self._pending_ws = ""  # that whitespace, dropped if another call follows
        # Inside a call: its opener, the closers that end it, and its body so far (in pieces,
        # joined once when the call ends: appending to one string would copy it per piece).
        self._opener = ""
        self._closers: tuple[str, ...] = ()
        self._closer_end = ""  # the last character of every closer ("" when they differ)
        self._parts: list[str] = []
        self._tail_len = 0  # how many trailing pieces may hold the start of a split closer
        self._skip_to = 0  # closers found before this offset of the body were read as text

    # -- FormatStream -------------------------------------------------------------------------

    def feed(self, delta: dict[str, Any]) -> list[Event]:
        content = delta.get("content") if isinstance(delta, dict) else None
        return self.feed_text(content) if isinstance(content, str) and content else []

    def feed_value(self, value: Any) -> list[Event]:
        return self.feed_text(value) if isinstance(value, str) and value else []

    def feed_text(self, text: str) -> list[Event]:
        # Hot paths. Plain text with nothing held cannot start or end anything unless it holds an
        # opener's first character. Inside a call, a piece without the character every closer ends
        # with (">" for the XML and JSON formats) cannot complete a closer.
        if self.plain:
            if self.mark not in text:
                return [TextDelta("content", text)] if text else []
        elif self._state == _CALL and self._closer_end not in text:
            if text:
                self._parts.append(text)
            return []
        events: list[Event] = []
        texts: list[str] = []
        data = text
        while data:
            if self._state == _TEXT:
                data = self._scan_text(data, texts, events)
            elif self._state == _THINK:
                data = self._scan_think(data, texts)
            else:
                data = self._scan_call(data, texts, events)
        _flush(texts, events)
        self.plain = self._state == _TEXT and not self._held and not self._after_call
        return events

    def finish(self) -> list[Event]:
        events: list[Event] = []
        texts: list[str] = []
        if self._state == _CALL:
            # An unclosed final call: vLLM parses it as far as it goes, and so do we.
            self._emit_call("".join(self._parts), None, texts, events)
        elif self._held:
            self._release(self._held, texts)  # a tag prefix at the very end is just text
        _flush(texts, events)
        self._reset()
        return events

    # -- states ---------------------------------------------------------------------------------

    def _scan_text(self, data: str, texts: list[str], events: list[Event]) -> str:
        buf = self._held + data
        self._held = ""
        grammar = self._grammar
        mark = self.mark
        pos = 0
        while True:
            i = buf.find(mark, pos) if mark else grammar.find_opening(buf, pos)
            if i < 0:
                self._release(buf, texts)
                return ""
            partial = False
            for tag in grammar.openers:  # by priority: the first that matches here is read
                if buf.startswith(tag, i):
                    if partial:
                        break  # a longer opener of higher priority may still be arriving
                    self._release(buf[:i], texts)
                    return self._open(tag, buf[i + len(tag) :], texts)
                if len(buf) - i < len(tag) and tag.startswith(buf[i:]):
                    partial = True
            if partial:  # undecided until more text arrives
                self._release(buf[:i], texts)
                self._held = buf[i:]
                return ""
            pos = i + 1

    def _open(self, tag: str, rest: str, texts: list[str]) -> str:
        if tag == THINK_START:
            self._release(tag, texts)
            self._state = _THINK
            return rest
        self._pending_ws = ""  # whitespace between two calls is not content
        self._state = _CALL
        self._opener = tag
        self._closers, self._tail_len, self._closer_end = self._grammar.closing[tag]
        self._parts = []
        self._skip_to = 0
        return rest

    def _scan_think(self, data: str, texts: list[str]) -> str:
        buf = self._held + data
        self._held = ""
        j = buf.find(THINK_END)
        if j >= 0:
            end = j + len(THINK_END)
            self._release(buf[:end], texts)
            self._state = _TEXT
            return buf[end:]
        # `</think>` has one "<", so a split closer can only start at the last "<".
        i = buf.rfind("<", max(0, len(buf) - len(THINK_END) + 1))
        if i >= 0 and THINK_END.startswith(buf[i:]):
            self._release(buf[:i], texts)
            self._held = buf[i:]
        else:
            self._release(buf, texts)
        return ""

    def _scan_call(self, data: str, texts: list[str], events: list[Event]) -> str:
        # A closer split across pieces starts within the body's last (len(closer) - 1)
        # characters; every piece holds at least one character, so that many pieces cover them.
        tail = self._tail_len
        window = "".join(self._parts[-tail:]) + data if tail else data  # [-0:] would be every piece
        self._parts.append(data)
        body: str | None = None
        offset = 0  # where in `window` to look: past closers already read as text
        while True:
            best = -1
            closer = ""
            for candidate in self._closers:
                j = window.find(candidate, offset)
                if j >= 0 and (best < 0 or j < best):
                    best, closer = j, candidate
            if best < 0:
                return ""
            if body is None:
                body = "".join(self._parts)
            cut = len(body) - len(window) + best  # the window is the body's suffix
            if cut < self._skip_to:
                offset = best + 1
                continue
            if closer == TOOL_CALL_END and self._opener == TOOL_CALL_START and not self._closes(body[:cut]):
                self._skip_to = cut + len(closer)
                offset = best + 1
                continue
            self._emit_call(body[:cut], closer, texts, events)
            return body[cut + len(closer) :]

    def _closes(self, body: str) -> bool:
        for fmt in self._grammar.block_formats:
            if fmt.claims(body):
                return fmt.block_closes(body)
        return True

    # -- helpers --------------------------------------------------------------------------------

    def _emit_call(self, body: str, closer: str | None, texts: list[str], events: list[Event]) -> None:
        if self._opener == TOOL_CALL_START:
            calls = self._parse_block(body, closer is not None)
        else:
            calls = self._grammar.bare[self._opener].parse_bare(body, closer=closer, schemas=self._schemas)
        _flush(texts, events)
        for call in calls:
            call.id = new_call_id()
            call.index = self._calls
            self._calls += 1
            events.append(CompletedCall(call))
        self._state = _TEXT
        self._after_call = True
        self._pending_ws = ""
        self._parts = []

    def _parse_block(self, body: str, closed: bool) -> list[ToolCall]:
        formats = self._grammar.block_formats
        for fmt in formats:
            if fmt.claims(body):
                return fmt.parse_block(body, closed=closed, schemas=self._schemas)
        raw = TOOL_CALL_START + body + (TOOL_CALL_END if closed else "")
        error = "tool call block holds neither a <function=...> call nor a JSON object"
        # Recorded under the first format that reads blocks: the store's source column names a
        # format, and an unreadable block has none of its own.
        source = formats[0].name
        return [ToolCall(name="", arguments_text=raw, arguments=None, source=source, error=error, raw=raw)]

    def _release(self, text: str, texts: list[str]) -> None:
        if not text:
            return
        if self._after_call:
            if text.isspace():
                self._pending_ws += text
                return
            text = self._pending_ws + text
            self._pending_ws = ""
            self._after_call = False
        texts.append(text)


def _flush(texts: list[str], events: list[Event]) -> None:
    if texts:
        events.append(TextDelta("content", "".join(texts)))
        texts.clear()
