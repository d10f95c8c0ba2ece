"""The attempt loop of the structured-call dialects: `/v1/responses` (OpenAI Responses API) and `/v1/messages`
(Anthropic Messages API).

The rules are chat's (proxy/dialects/chat.py and DESIGN.md's data flow): every call of an attempt is judged; in enforce
mode an attempt with a rejected or malformed call never reaches the client and the model is asked again, with
the held turn and the reasons appended to the conversation in the dialect's own shape, within the policy's
retry budget; budget spent => a text answer that explains the block. One narration per turn, as on chat: the
first attempt's text streams live, a retry's text is held with its calls until the attempt is judged and goes
out only with a delivered turn (a blocked turn ends with the explaining answer alone). A delivered turn's calls
are the judged call objects: a repaired call is re-encoded from its judged arguments, never relayed as the
upstream wrote it (proxy/enforce/judging.py).

A `Dialect` says what its requests, whole responses and retries look like, and makes the `DialectStream` that
reads its server-sent events; this module runs the whole-response loop for both dialects, and `DialectStream`
gives the streamed loop that chat shares (proxy/enforce/relay.py) the dialects' steps, with the held-call
machinery both dialects use. The upstream attempts themselves are proxy/enforce/attempts.py's.
The reasons a model reads come from the same `retry_messages` as chat, translated into the dialect's items.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Hashable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from proxy import strict
from proxy.enforce.actions import unjudgeable_call
from proxy.enforce.attempts import upstream_events, whole_attempt
from proxy.enforce.exchange import Exchange, Outcome
from proxy.enforce.feedback_turns import blocked_message, retry_messages
from proxy.enforce.prelude import RouteShape, open_exchange
from proxy.enforce.relay import StreamedAttempts
from proxy.enforce.serve import judged_json, serve
from proxy.errors import BlockedTurn, ProxyError, UpstreamProtocolError, UpstreamUnjudgeable, error_response
from proxy.record import JudgedCall, Usage
from proxy.services import Services
from proxy.toolcalls import ToolCall
from proxy.upstream.sse import SSEEvent

__all__ = ["Dialect", "DialectExchange", "DialectStream", "HeldCall", "IndexMap", "handle"]


class Dialect(ABC):
    """One API's shapes. Conversation and reply are also given as chat-shaped messages, which is what the
    session resolver's lineage hashes."""

    route: ClassVar[str]  # the `route` recorded with every request and call
    path: ClassVar[str]  # the upstream path after /v1
    history_key: ClassVar[str]  # the request field retries append to
    output_key: ClassVar[str]  # the whole response's list of items that `calls` reads the calls from

    def __init_subclass__(cls, *, route: str, path: str, history_key: str, output_key: str, **kwargs: Any) -> None:
        """A dialect declares these in its class line, as the errors do (proxy/errors.py)."""
        super().__init_subclass__(**kwargs)
        cls.route, cls.path, cls.history_key, cls.output_key = route, path, history_key, output_key

    @abstractmethod
    def validate(self, payload: dict[str, Any]) -> None:
        """Raise BadRequest when the conversation field is missing or of the wrong type."""

    @abstractmethod
    def offered(self, payload: dict[str, Any]) -> set[str]:
        """The tool names the request offers; a call to any other is `unknown_tool`."""

    @abstractmethod
    def history(self, payload: dict[str, Any]) -> list[Any]:
        """The conversation as a list the retry items can be appended to."""

    @abstractmethod
    def conversation(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        """The request's conversation as chat messages, for the session lineage."""

    @abstractmethod
    def calls(self, obj: dict[str, Any]) -> list[ToolCall]:
        """The tool calls of a whole response, in order."""

    @abstractmethod
    def text(self, obj: dict[str, Any]) -> str:
        """The visible text of a whole response (the held turn's content in a retry)."""

    @abstractmethod
    def usage(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        """A usage object of this dialect as chat usage (`prompt_tokens`, ...), which `Usage.add` reads."""

    @abstractmethod
    def set_usage(self, obj: dict[str, Any], usage: Usage) -> None:
        """Write the usage summed over the attempts into a response (the client pays for all of them)."""

    @abstractmethod
    def set_blocked(self, obj: dict[str, Any], text: str) -> None:
        """Turn a whole response into one plain text answer."""

    @abstractmethod
    def retry_items(self, turn: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`retry_messages`' chat turn (assistant with tool_calls, one tool message per call) in this dialect."""

    @abstractmethod
    def reply(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """What the client got, as chat messages, for the session lineage."""

    def response_id(self, obj: dict[str, Any]) -> str | None:
        """The id a whole response gives the client to continue from (`previous_response_id`), if the API has one."""
        return None

    def prepare(self, ex: DialectExchange) -> None:
        """Edit the request before its first attempt goes up (Responses: the id it continues from)."""
        return None

    def chain(self, ex: DialectExchange, response_id: str | None) -> None:
        """Note what the id the client was given must continue from upstream (Responses)."""
        return None

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

    @abstractmethod
    def stream(self, ex: DialectExchange) -> DialectStream[Any]:
        """A reader for this request's events, across its attempts."""

    def error_response(self, exc: ProxyError) -> Response:
        return error_response(exc)


@dataclass
class DialectExchange(Exchange):
    """Chat's Exchange, whose retries append to the dialect's conversation field instead of `messages`."""

    dialect: Dialect | None = None

    @property
    def spec(self) -> Dialect:
        assert self.dialect is not None
        return self.dialect

    def body(self) -> bytes:
        if not self.extra_messages and not self.body_changed:
            return self.original_body
        key = self.spec.history_key
        return self.edited_body(key, self.spec.history(self.payload) if self.extra_messages else [])

    def error_response(self, exc: ProxyError) -> Response:
        return self.spec.error_response(exc)

    def broken_error_body(self, response: Any, exc: Exception) -> Response:
        self.record.fail("upstream_error", f"upstream failed: {exc}")
        return self.spec.error_response(UpstreamProtocolError(f"upstream failed: {exc}"))

    def remember(self, reply: list[dict[str, Any]], response_id: str | None = None) -> None:
        """Let the client's next request (this conversation plus what it got, or the response id it was given)
        continue this session."""
        self.spec.chain(self, response_id)
        if not reply:
            return
        messages = list(self.conversation or []) + reply[:-1]
        self.state.sessions.remember(self.record.session, messages, reply[-1], response_id=response_id)


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


class DialectStream(StreamedAttempts, Generic[HeldT]):
    """Reads one request's server-sent events, attempt after attempt, and says what the client gets; its attempts
    run in the one loop (`StreamedAttempts.run`)."""

    def __init__(self, ex: DialectExchange) -> None:
        self.ex: DialectExchange = ex
        self.path = ex.spec.path
        self.attempt = 1
        self.upstream_error = False
        self.done = False
        self.attempt_usage: dict[str, Any] | None = None  # chat-shaped, the latest seen this attempt
        self.unjudged: list[ToolCall] = []  # the attempt's output the proxy cannot judge
        # A retry's text events (enforce mode), in the order they came: like held calls, numbered and placed
        # only when released, so dropping them leaves no gap in what the client sees.
        self.narration: list[dict[str, Any]] = []
        self.positions = IndexMap()
        self.held: dict[Hashable, HeldT] = {}  # the attempt's calls by the upstream's position, in order
        self.attempt_text = ""  # the attempt's visible text: the held turn's content in a retry
        self.sent_kinds: set[str] = set()  # the kinds of text the first attempt sent (`narrate`)

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
        """One text event of the attempt (enforce mode). One narration per turn: the first attempt's text goes
        out now; a retry's waits for the verdict and goes out only with a delivered turn
        (`released_narration`), and only where the first attempt sent no text of its kind: text a client has
        received is never sent to it again, so it holds the first attempt's narration and the delivered calls."""
        kind = self.text_kind(obj)
        if self.attempt == 1 and not self.ex.acts_on_text:  # a text-acting client's text is its actions: held
            if self.carries_text(obj) and kind is not None:
                self.sent_kinds.add(kind)
            return self.encode(obj)
        if kind is None or kind not in self.sent_kinds:
            self.narration.append(obj)
        return None

    @abstractmethod
    def text_kind(self, obj: dict[str, Any]) -> str | None:
        """The kind of text item or block a text event belongs to (`text`, `thinking`; `message`, `reasoning`)."""

    @abstractmethod
    def carries_text(self, obj: dict[str, Any]) -> bool:
        """Whether a text event gives the client text of its kind (a non-empty delta, a block started whole)."""

    def released_narration(self) -> list[bytes]:
        """The held text of a delivered attempt, encoded now: numbered and placed after everything sent so far."""
        out = [self.encode(obj) for obj in self.narration]
        self.narration = []
        return out

    @abstractmethod
    def encode(self, obj: dict[str, Any]) -> bytes:
        """An event of this attempt as the client gets it: at the client's position for its item (enforce mode)."""

    def unjudgeable(self, what: str, detail: str, content: Any) -> None:
        """Output of this attempt the proxy cannot judge: a call that is never allowed (enforce mode drops the
        output itself; observe mode relays it), recorded with the attempt's calls."""
        self.unjudged.append(unjudgeable_call(what, detail, content))

    def read(self, event: SSEEvent) -> dict[str, Any] | None:
        """The event's JSON object. Enforce mode refuses anything else (UpstreamUnjudgeable); observe mode
        records it and gets None (the caller relays the bytes)."""
        detail = event.invalid
        if detail is None and event.data is not None:
            try:
                obj = strict.loads(event.data) if self.enforce else json.loads(event.data)
            except ValueError as exc:
                detail = f"an event that does not parse: {exc}"
            else:
                if isinstance(obj, dict):
                    return obj
                detail = f"an event that is a JSON {type(obj).__name__}"
        detail = detail or "an event without data"
        if self.enforce:
            raise UpstreamUnjudgeable(f"unjudgeable: the upstream sent {detail}")
        self.unjudgeable("event", detail, event.raw.decode("utf-8", "replace"))
        return None

    def drop(self, event: SSEEvent, detail: str, content: Any, *, name: str = "event") -> bytes | None:
        """Output the proxy cannot judge: recorded; dropped in enforce mode, relayed in observe mode."""
        self.unjudgeable(name, detail, content)
        return event.raw if not self.enforce else None

    def fail(self, detail: str, status: int | None = None) -> None:
        self.upstream_error = True
        self.ex.record.fail("upstream_error", detail[:1000], status)

    def event(self, event: SSEEvent) -> bytes | None:
        """One upstream event: what to send now (None: nothing, or held)."""
        if event.data is None and event.invalid is None:  # comments and keep-alives
            return event.raw if not self.enforce else (b": keep-alive\n\n" if event.comment else None)
        obj = self.read(event)
        if obj is None:
            return event.raw
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

    async def relay_attempt(self, response: Any) -> AsyncIterator[bytes]:
        try:
            async with aclosing(upstream_events(self.ex, response)) as events:
                async for event in events:
                    out = self.event(event)
                    if out:
                        yield out
                    if self.upstream_error:
                        return
        except ProxyError as exc:
            self.fail(exc.message)
            yield self.error(exc.message, exc.error_type, exc.code)
        finally:
            if self.attempt_usage is not None:
                self.ex.record.usage.add(self.attempt_usage)

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


# ---------------------------------------------------------------- the request


async def handle(request: Request, state: Services, dialect: Dialect) -> Response:
    return await serve(await _exchange(request, state, dialect), path=dialect.path,
                       relay=lambda ex, response: ex.spec.stream(ex).run(response), whole=_complete)


async def _exchange(request: Request, state: Services, dialect: Dialect) -> DialectExchange:
    shape = RouteShape(name=dialect.route, validate=dialect.validate, conversation=dialect.conversation,
                       tools=lambda payload: (None, dialect.offered(payload)), asks_usage=False)
    exchange: DialectExchange = await open_exchange(request, state, shape, DialectExchange, dialect=dialect)
    dialect.prepare(exchange)
    return exchange


# ---------------------------------------------------------------- non-streaming


async def _complete(ex: DialectExchange) -> Response:
    record, dialect = ex.record, ex.spec
    judged: list[JudgedCall] = []
    obj: dict[str, Any] = {}
    for attempt in range(1, ex.budget + 2):
        record.attempts = attempt
        # An upstream error is already in the dialect's shape.
        read = await whole_attempt(ex, dialect.path, f"a {dialect.route} response", dialect.calls, dialect.usage)
        if isinstance(read, Response):
            return read
        obj = read.obj
        judged = ex.judge(read.found) + ex.judge_text(dialect.text(obj))
        outcome = await ex.settle(attempt, judged)
        if outcome is Outcome.DELIVER:
            if any(item.repaired for item in judged):
                dialect.write_repairs(obj, judged)  # enforce mode only: the re-encoded object goes out below
            ex.remember(dialect.reply(obj), dialect.response_id(obj))
            if attempt == 1 and not ex.enforce:
                return Response(read.response.content, status_code=200, headers=read.headers)
            dialect.set_usage(obj, record.usage)
            return judged_json(obj)
        if outcome is Outcome.BLOCKED:
            break
        ex.extra_messages += dialect.retry_items(retry_messages(ex.policy, dialect.text(obj), judged))
    text = blocked_message(ex.policy, judged, record.attempts)
    if ex.demands_call:
        return ex.error_response(BlockedTurn(text))
    dialect.set_blocked(obj, text)
    dialect.set_usage(obj, record.usage)
    ex.remember(dialect.reply(obj), dialect.response_id(obj))
    return judged_json(obj)


# ---------------------------------------------------------------- streaming



