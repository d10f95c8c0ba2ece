"""The one reading of a judged route's upstream events, for every route's stream (chat, completions, Responses,
Messages): what every route does with an event before its own shape matters.

An attempt's bytes are framed by the WHATWG rules (proxy/upstream/sse.py) and every event goes through `event`:
an event that cannot be read (not UTF-8, not JSON, not a JSON object) refuses the stream in enforce mode and is
relayed and recorded as `unjudgeable` in observe mode; keep-alives pass (enforce mode sends its own); a route
whose stream ends with `data: [DONE]` reads it, and what follows it, before any JSON (`done_event`); every other event
is the route's (`object_event`). `relay_attempt` reads one upstream attempt through it, translating the
upstream's errors once, into the route's error event.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from typing import Any, ClassVar

from proxy import strict
from proxy.enforce.actions import unjudgeable_call
from proxy.enforce.exchange import Exchange
from proxy.errors import ProxyError, UpstreamUnjudgeable
from proxy.toolcalls import ToolCall
from proxy.upstream.sse import SSEDecoder, SSEEvent

__all__ = ["KEEP_ALIVE", "EventReader", "error_chunk"]

KEEP_ALIVE = b": keep-alive\n\n"


class EventReader(ABC):
    """Reads one route's upstream events; the route gives what is its own (`object_event`, and `done` where its
    stream ends with `[DONE]`) and how it records and answers what it cannot judge."""

    ex: Exchange
    upstream_error: bool  # the attempt ended in an error the client has been (or is about to be) sent
    attempt_usage: Any = None  # the attempt's usage as chat usage (the latest seen), counted when it ends
    ends_with_done: ClassVar[bool] = False  # the stream ends with `data: [DONE]` (OpenAI's chunked routes)
    done_seen: bool = False  # `[DONE]` came in this attempt (where the stream ends with it)
    event_name: ClassVar[str] = "event"  # the tool name an event that cannot be read is recorded under

    def event(self, event: SSEEvent) -> bytes | None:
        """One upstream event: what the client gets now (None: nothing, or held)."""
        if event.invalid is not None:
            return self.unparseable(event, event.invalid)
        if event.data is None:  # comments and keep-alives
            return event.raw if not self.ex.enforce else (KEEP_ALIVE if event.comment else None)
        if self.ends_with_done and (self.done_seen or event.is_done):
            return self.done_event(event)
        try:
            obj = strict.loads(event.data) if self.ex.enforce else json.loads(event.data)
        except ValueError as exc:
            return self.unparseable(event, f"an event that does not parse: {exc}")
        if not isinstance(obj, dict):
            return self.unparseable(event, f"an event that is a JSON {type(obj).__name__}")
        return self.object_event(event, obj)

    def unparseable(self, event: SSEEvent, detail: str) -> bytes | None:
        """An event the proxy cannot read. Enforce mode refuses the stream (UpstreamUnjudgeable); observe mode
        relays the bytes and records that it could not judge them."""
        if self.ex.enforce:
            raise UpstreamUnjudgeable(f"unjudgeable: the upstream sent {detail}")
        self.unjudged_output(unjudgeable_call(self.event_name, detail, event.raw.decode("utf-8", "replace")))
        return event.raw

    def drop(self, event: SSEEvent, detail: str, content: Any, *, name: str = "event") -> bytes | None:
        """Output the proxy does not judge (after the end, or of an unknown shape): dropped in enforce mode,
        relayed in observe mode; recorded as an `unjudgeable` call of the attempt in both."""
        self.unjudged_output(unjudgeable_call(name, detail, content))
        return event.raw if not self.ex.enforce else None

    @abstractmethod
    def unjudged_output(self, call: ToolCall) -> None:
        """Output of this attempt the proxy cannot judge, as a call that is never allowed: recorded with the
        attempt's calls."""

    def done_event(self, event: SSEEvent) -> bytes | None:
        """`[DONE]`, or data after it (routes whose streams end with it)."""
        raise NotImplementedError

    @abstractmethod
    def object_event(self, event: SSEEvent, obj: dict[str, Any]) -> bytes | None:
        """One upstream event that is a JSON object: what the client gets now (None: nothing, or held)."""

    @abstractmethod
    def fail(self, detail: str, status: int | None = None) -> None:
        """The record says the request ended in an upstream error."""

    @abstractmethod
    def error(self, message: str, type_: str, code: Any) -> bytes:
        """An error event in the route's shape (the attempt ends in an upstream error)."""

    def quick(self, chunk: bytes) -> bytes | None:
        """What the client gets for `chunk`, one whole event read between events, when the route can tell from its
        bytes alone (the bulk of a stream); None: read it as every event is read (`event`)."""
        return None

    def attempt_end(self) -> list[bytes]:
        """What the client gets when the attempt's stream has ended without an error, before it is judged."""
        return []

    async def relay_attempt(self, response: Any) -> AsyncGenerator[bytes, None]:
        """The events of one attempt (an open upstream stream) as the client gets them now; an upstream that
        breaks off ends the attempt with the route's error event."""
        record = self.ex.record
        decoder = SSEDecoder()
        event_of, quick = self.event, self.quick  # the chunks read here, not through a generator: a stream has many
        try:
            with self.ex.state.upstream.errors_translated(response):
                # What the events of one read release goes out in one write, as a passthrough relays that read:
                # a loaded proxy reads several events at once, and a write per event would cost a send per event.
                async for chunk in response.aiter_raw():
                    if record.ttfb_ms is None:
                        record.mark_first_byte()
                    if decoder.between_events() and (out := quick(chunk)) is not None:
                        yield out
                        continue
                    pieces: list[bytes] = []
                    for event in decoder.feed(chunk):
                        out = event_of(event)
                        if self.upstream_error:  # the error ends the attempt, a piece of its own
                            if pieces:
                                yield b"".join(pieces)
                            if out:
                                yield out
                            return
                        if out:
                            pieces.append(out)
                    if pieces:
                        yield pieces[0] if len(pieces) == 1 else b"".join(pieces)
            for event in decoder.close():
                out = event_of(event)
                if out:
                    yield out
                if self.upstream_error:
                    return
        except ProxyError as exc:
            self.upstream_error = True
            self.fail(exc.message)
            yield self.error(exc.message, exc.error_type, exc.code)
            return
        finally:
            if self.attempt_usage is not None:
                record.usage.add(self.attempt_usage)
        for out in self.attempt_end():
            yield out


def error_chunk(reader: EventReader, event: SSEEvent, obj: dict[str, Any]) -> bytes:
    """An OpenAI-shaped error chunk (`{"error": ...}` without choices) on chat and completions streams: the
    attempt ends as an upstream error; enforce mode sends the error alone, in the proxy's encoding."""
    reader.upstream_error = True
    error = obj.get("error")
    reader.fail(json.dumps(error)[:1000] if error else "error event")
    return event.raw if not reader.ex.enforce else strict.encode_event({"error": error})
