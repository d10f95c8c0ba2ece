"""What the structured-call routes share: `/v1/responses` (OpenAI Responses API) and `/v1/messages` (Anthropic
Messages API), whose calls are items of the answer (output items, content blocks) rather than text.

A whole answer gets its repaired calls written over the items they were read from (`StructuredDialect`); a
stream (`DialectStream`) holds each call's events until the attempt is judged, holds a retry's text events
(released with a delivered turn as what of them the client does not have yet, then the refusal line:
`released_text`), and gives every event its number and the client's position for its item only when it
is sent (`IndexMap`), so held events released later, or dropped with a rejected attempt, leave no gap. Its
attempts run in the one streamed attempt loop (proxy/enforce/relay.py), its events are read by the one
`EventReader` (proxy/dialects/event_reader.py).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from starlette.responses import Response

from proxy.dialects.base import Dialect, DialectExchange
from proxy.dialects.event_reader import EventReader
from proxy.enforce.actions import unjudgeable_call
from proxy.enforce.attempts import WholeAttempt
from proxy.enforce.feedback_turns import blocked_message, retry_messages
from proxy.enforce.relay import StreamedAttempts
from proxy.enforce.retry_text import continuation, line_break
from proxy.enforce.serve import judged_json
from proxy.record import JudgedCall
from proxy.toolcalls import ToolCall
from proxy.upstream.sse import SSEEvent

__all__ = ["DialectStream", "HeldCall", "IndexMap", "StructuredDialect", "cuts"]


class StructuredDialect(Dialect, ABC):
    """A route whose calls are structured items of the answer (Responses' output items, Messages' content
    blocks): a delivered whole answer gets its repaired calls written over the items they were read from."""

    output_key: ClassVar[str]  # the whole response's list of items that `read_whole` reads the calls from

    def __init_subclass__(cls, *, output_key: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.output_key = output_key

    def read_whole(self, ex: DialectExchange, obj: dict[str, Any]) -> list[ToolCall]:
        return self.calls(obj)

    @abstractmethod
    def calls(self, obj: dict[str, Any]) -> list[ToolCall]:
        """The tool calls of a whole response, in order."""

    @abstractmethod
    def repaired_fields(self, call: ToolCall) -> dict[str, Any]:
        """The fields of a call's item that carry a repaired call's judged arguments."""

    def write_repairs(self, obj: dict[str, Any], judged: list[JudgedCall]) -> None:
        """Write the repaired calls' judged arguments over the calls of a whole response (at the position each
        call was read from), so the client gets the repaired call and never the one the model wrote."""
        items = obj[self.output_key]  # `calls` read the judged calls from it, each at its position
        for item in judged:
            if item.repaired:
                items[item.call.index].update(self.repaired_fields(item.call))

    def delivered(self, ex: DialectExchange, read: WholeAttempt[Any], judged: list[JudgedCall],
                  attempt: int) -> Response:
        obj = read.obj
        if any(item.repaired for item in judged):
            self.write_repairs(obj, judged)  # enforce mode only: the re-encoded object goes out below
        if attempt > 1:  # only enforce mode re-asks
            self.add_note(ex, obj)
        ex.remember(self.reply(obj), self.response_id(obj))
        if attempt == 1 and not ex.enforce:
            return Response(read.response.content, status_code=200, headers=read.headers)
        self.set_usage(obj, ex.record.usage)
        return judged_json(obj)

    def add_note(self, ex: DialectExchange, obj: dict[str, Any]) -> None:
        # At the end of the last answer item or block (clients that show one, the last, show it with the answer),
        # else in one of its own, after the text ones and before the calls (as a stream sends it).
        items = obj.get(self.output_key)
        held = self.text(obj)
        note = ex.refusal_note(held) if isinstance(items, list) else ""
        if note:
            assert isinstance(items, list)
            line = line_break(held) + note
            if not self.append_note(items, line):
                place = next((k for k, item in enumerate(items) if not self.is_text_item(item)), len(items))
                items.insert(place, self.note_item(line))

    @abstractmethod
    def append_note(self, items: list[Any], line: str) -> bool:
        """Add the refusal line to the text of the last answer item of a whole response; False where there is none."""

    @abstractmethod
    def is_text_item(self, item: Any) -> bool:
        """Whether an item of a whole answer carries only text (not a call)."""

    @abstractmethod
    def note_item(self, text: str) -> dict[str, Any]:
        """The refusal line as an answer item of a whole response."""

    def broken_error_body(self, ex: DialectExchange, response: Any, exc: Exception) -> Response:
        return self.protocol_error(ex, exc)


class IndexMap:
    """Positions of the items (output items, content blocks) of the current attempt -> the positions the
    client sees. A client assigns positions in the order items start, so they are handed out in the order
    items are sent: held items get theirs when released, a retry's items continue after the earlier ones,
    and held items that are dropped (a rejected attempt's calls and, after the first attempt, its text) never
    take one, so the client's positions stay consecutive."""

    def __init__(self) -> None:
        self.next = 0
        self._map: dict[Hashable, int] = {}

    def new_attempt(self) -> None:
        self._map = {}

    def client(self, key: Hashable) -> int:
        found = self._map.get(key)
        if found is None:
            found = self._map[key] = self.next
            self.next += 1
        return found


class HeldCall(Protocol):
    """A call of the current attempt, its events kept until the attempt is judged."""

    events: list[tuple[dict[str, Any], bytes]]  # each event's object and its upstream bytes

    def call(self, index: int) -> ToolCall:
        """The call the kept events make, the attempt's `index`-th."""
        ...


HeldT = TypeVar("HeldT", bound=HeldCall)


class DialectStream(EventReader, StreamedAttempts, Generic[HeldT]):
    """Reads one request's server-sent events, attempt after attempt, and says what the client gets; its attempts
    run in the one loop (`StreamedAttempts.run`)."""

    answer_kind: ClassVar[str]  # the `text_kind` of the answer's text (not the thinking's)

    def __init__(self, ex: DialectExchange) -> None:
        self.ex: DialectExchange = ex
        self.path = ex.spec.path
        self.attempt = 1
        self.upstream_error = False
        self.done = False
        self.attempt_usage: dict[str, Any] | None = None  # chat-shaped, the latest seen this attempt
        self.unjudged: list[ToolCall] = []  # the attempt's output the proxy cannot judge
        # A retry's text events (enforce mode), with their kind, in the order they came: like held calls,
        # numbered and placed only when released, so dropping them leaves no gap in what the client sees.
        self.narration: list[tuple[str | None, dict[str, Any]]] = []
        self.positions = IndexMap()
        self.held: dict[Hashable, HeldT] = {}  # the attempt's calls by the upstream's position, in order
        self.attempt_text = ""  # the attempt's visible text: the held turn's content in a retry
        # The text the client holds of this turn per kind (`text_kind`), in pieces joined when needed: what a
        # delivered retry's text of that kind is compared with (proxy/enforce/retry_text.py).
        self.sent_text: dict[str, list[str]] = {}

    @property
    def enforce(self) -> bool:
        return self.ex.enforce

    def begin_attempt(self) -> None:
        self.attempt += 1
        self.attempt_usage = None
        self.unjudged = []
        self.narration = []
        self.positions.new_attempt()
        self.held = {}
        self.attempt_text = ""

    def narrate(self, obj: dict[str, Any]) -> bytes | None:
        """One text event of the attempt (enforce mode). The first attempt's text goes out now; a retry's waits
        for the verdict and goes out only with a delivered turn, as what of it the client does not have yet
        (`released_text`)."""
        kind = self.text_kind(obj)
        if self.attempt == 1 and not self.ex.acts_on_text:  # a text-acting client's text is its actions: held
            text = self.event_text(obj)
            if text and kind is not None:
                self.sent_text.setdefault(kind, []).append(text)
            return self.encode(obj)
        self.narration.append((kind, obj))
        return None

    @abstractmethod
    def text_kind(self, obj: dict[str, Any]) -> str | None:
        """The kind of text item or block a text event belongs to (`text`, `thinking`; `message`, `reasoning`)."""

    @abstractmethod
    def event_text(self, obj: dict[str, Any]) -> str:
        """The text a text event adds to its item or block as a client reads it (a delta, a block started with
        text); "" for the events that open, close or sum one up."""

    @abstractmethod
    def trim(self, events: list[tuple[str | None, dict[str, Any]]], skip: dict[str, int]) -> list[dict[str, Any]]:
        """The held text events with the first `skip[kind]` characters of each kind's text taken out: an item or
        block left without text dropped whole, one cut in part rewritten so that every place a client reads its
        text from (deltas, `.done` events, the closing item) says the text that is left."""

    @abstractmethod
    def with_note(self, events: list[dict[str, Any]], line: str) -> list[dict[str, Any]] | None:
        """Released text events with the refusal line added to the text of their last answer item or block (every
        place a client reads that text from says it); None where they hold none."""

    @abstractmethod
    def note_events(self, text: str) -> list[bytes]:
        """The refusal line as an answer item or block of its own, placed after everything sent so far."""

    @abstractmethod
    def client_text(self) -> str:
        """The answer text the client holds of this turn (where the refusal line is looked for)."""

    def released_text(self) -> list[bytes]:
        """The held text of a delivered attempt, encoded now (numbered and placed after everything sent so far)
        without what the client already has of each kind (proxy/enforce/retry_text.py: an item or block of its own
        needs no break); after a refusal, the line that says what was refused ends the last answer item or block it
        releases (clients that show only the last one, as Claude Code's print mode and `codex exec` do, show it with
        the answer), else stands in one of its own."""
        said: dict[str, str] = {}
        for kind, obj in self.narration:
            text = self.event_text(obj)
            if kind is not None and text:
                said[kind] = said.get(kind, "") + text
        skip = {kind: continuation("".join(self.sent_text.get(kind, ())), text, separate=False).skip
                for kind, text in said.items()}
        events = self.trim(self.narration, skip) if any(skip.values()) else [obj for _, obj in self.narration]
        for kind, text in said.items():
            self.sent_text.setdefault(kind, []).append(text[skip[kind]:])
        self.narration = []
        line = ""
        if self.attempt > 1:
            held = self.client_text() + said.get(self.answer_kind, "")[skip.get(self.answer_kind, 0):]
            note = self.ex.refusal_note(held)
            # A paragraph of its own: clients that join a turn's text (the SDKs' `output_text`) show it apart too.
            line = line_break(held) + note if note else ""
            inside = self.with_note(events, line) if line else None
            if inside is not None:
                events, line = inside, ""
        out = [self.encode(obj) for obj in events]
        return out + (self.note_events(line) if line else [])

    @abstractmethod
    def encode(self, obj: dict[str, Any]) -> bytes:
        """An event of this attempt as the client gets it: at the client's position for its item (enforce mode)."""

    def unjudgeable(self, what: str, detail: str, content: Any) -> None:
        """Output of this attempt the proxy cannot judge: a call that is never allowed (enforce mode drops the
        output itself; observe mode relays it), recorded with the attempt's calls."""
        self.unjudged.append(unjudgeable_call(what, detail, content))

    def unjudged_output(self, call: ToolCall) -> None:
        self.unjudged.append(call)

    def fail(self, detail: str, status: int | None = None) -> None:
        self.upstream_error = True
        self.ex.record.fail("upstream_error", detail[:1000], status)

    def object_event(self, event: SSEEvent, obj: dict[str, Any]) -> bytes | None:
        kind = obj.get("type") or event.event or ""
        end = self.ended()
        if end is not None:
            return self.drop(event, f"`{str(kind)[:60]}` after {end}", obj)
        if kind == "error":
            self.fail(json.dumps(obj)[:1000])
            return event.raw if not self.enforce else self.encode_error(obj)
        return self.typed_event(event, obj, kind)

    def encode_error(self, obj: dict[str, Any]) -> bytes:
        """The upstream's error event as the client gets it (enforce mode)."""
        return self.encode(obj)

    @abstractmethod
    def ended(self) -> str | None:
        """What ended the attempt's stream (`message_stop` ...), once it came; any event after it is dropped."""

    @abstractmethod
    def typed_event(self, event: SSEEvent, obj: dict[str, Any], kind: Any) -> bytes | None:
        """One upstream event's JSON object before the end, not an error, of type `kind` (its `type`, else the SSE
        event name): what to send now (None: nothing, or held)."""

    def calls(self) -> list[ToolCall]:
        """The calls of the attempt that just ended: the held calls, then what it could not judge."""
        return [held.call(k) for k, held in enumerate(self.held.values())] + self.unjudged

    def text(self) -> str:
        """The visible text of the attempt that just ended."""
        return self.attempt_text

    @abstractmethod
    def release(self, judged: list[JudgedCall]) -> list[bytes]:
        """The attempt was delivered: its held text, its calls as judged (`judged` in the order of `calls()`; a
        repaired call re-encoded from its judged arguments), then its end (enforce mode; observe sent them)."""

    @abstractmethod
    def blocked(self, text: str) -> list[bytes]:
        """The budget is spent: a text answer, then the end of the response."""

    @abstractmethod
    def error(self, message: str, type_: str, code: Any) -> bytes:
        """An error event in this dialect."""

    @abstractmethod
    def reply(self) -> list[dict[str, Any]]:
        """What the client got, as chat messages, for the session lineage."""

    # -- the attempt loop's steps (proxy/enforce/relay.py)

    def judge_attempt(self) -> list[JudgedCall]:
        # calls() first: `release` pairs the held calls with the head of this list; text actions follow.
        return self.ex.judge(self.calls()) + self.ex.judge_text(self.text())

    def deliver(self, judged: list[JudgedCall]) -> list[bytes]:
        return self.release(judged) if self.enforce else []

    def block(self, judged: list[JudgedCall]) -> list[bytes]:
        return self.blocked(blocked_message(self.ex.policy, judged, self.attempt))

    def retry_turn(self, judged: list[JudgedCall]) -> list[dict[str, Any]]:
        return self.ex.spec.retry_items(retry_messages(self.ex.policy, self.text(), judged))

    def response_id(self) -> str | None:
        """The id the client was given for the streamed response, if the API has one."""
        return None

    def remember(self) -> None:
        self.ex.remember(self.reply(), self.response_id())


def cuts(texts: Iterable[tuple[Any, str | None, str]], skip: dict[str, int]) -> dict[Any, list[int]]:
    """Per item or block (its key, kind and each event's text, in order): how many characters of its text to take
    out from its start, the first `skip[kind]` of each kind's text being what the client has; an item or block
    whose text all goes is left out (it has text, and none of it is new)."""
    sizes: dict[Any, tuple[str | None, int]] = {}
    for key, kind, text in texts:
        known = sizes.get(key, (kind, 0))
        sizes[key] = (known[0], known[1] + len(text))
    left = dict(skip)
    out: dict[Any, list[int]] = {}
    for key, (kind, size) in sizes.items():
        cut = min(left.get(kind, 0), size) if kind is not None else 0
        if cut:
            left[kind] -= cut  # type: ignore[index]  # kind is not None where cut is
        if not (size and cut == size):
            out[key] = [cut]
    return out
