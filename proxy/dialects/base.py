"""The one shape of a judged route (`Dialect`), and what the routes share.

Every route that can carry a model's tool call (`/v1/chat/completions`, `/v1/completions`, `/v1/responses`,
`/v1/messages`) is one `Dialect` subclass in a module of its own, declaring its name, upstream path and
conversation field in its class line and its pieces as methods (`PIECES`, `REASK_PIECES`); the route table
(`JUDGED`, proxy/dialects/routes.py) lists them and refuses a route that lacks a piece (`missing_pieces`).

The rules are one (DESIGN.md's data flow): every call of an attempt is judged; in enforce mode an attempt with a
rejected or malformed call never reaches the client and the model is asked again, with the held turn and the
reasons appended to the conversation in the route's own shape, within the policy's retry budget; budget spent
=> a text answer that explains the block. `Dialect.complete` is the one whole-answer attempt loop;
`StreamedAttempts` (proxy/enforce/relay.py) the one streamed one, fed its steps by chat's relay and by
`DialectStream`, which holds the calls, text and renumbering of the structured-call routes (Responses,
Messages: proxy/dialects/structured.py). Every answer reaches the user (invariant 12): the first attempt's text
streams live, a retry's text is held with its calls until the attempt is judged and goes out with a delivered turn,
without what the client already has of it (proxy/enforce/retry_text.py); a turn delivered after a refusal, streamed
or whole, ends with one line that says what was refused (`add_note`); a blocked turn ends with the explaining
answer alone. A delivered turn's calls are the judged call objects: a repaired call
is re-encoded from its judged arguments, never relayed as the upstream wrote it (proxy/enforce/judging.py).
The upstream attempts themselves are the Exchange's (proxy/enforce/exchange.py); the reasons a model reads
come from the one `retry_messages`, translated into the route's items.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from starlette.requests import Request
from starlette.responses import Response

from proxy.enforce.attempts import WholeAttempt, whole_attempt
from proxy.enforce.exchange import Exchange, Outcome
from proxy.enforce.feedback_turns import blocked_message, retry_messages
from proxy.enforce.prelude import open_exchange
from proxy.enforce.serve import judged_json, serve
from proxy.errors import BlockedTurn, ProxyError, UpstreamProtocolError, error_response
from proxy.record import JudgedCall, Usage
from proxy.services import Services
from proxy.sessions.project_root import ClientText

__all__ = ["PIECES", "REASK_PIECES", "Dialect", "DialectExchange", "Relay", "missing_pieces"]


class Dialect(ABC):
    """One judged route: how its requests, whole answers, streams and retries look. Every judged route is one
    (chat completions, completions, Responses, Messages), and the one table (`JUDGED`, proxy/dialects/routes.py)
    lists them; `missing_pieces` names what a route lacks, and the table refuses such a route.

    Conversation and reply are also given as chat-shaped messages, which is what the session resolver's lineage
    hashes."""

    route: ClassVar[str]  # the `route` recorded with every request and call
    path: ClassVar[str]  # the upstream path after /v1
    history_key: ClassVar[str]  # the request field retries append to
    asks_usage: ClassVar[bool]  # streams get `stream_options.include_usage` (the statistics count tokens)
    reasks: ClassVar[bool]  # a rejected call is fed back and the model asked again (else `complete` is the route's)
    counted_keys: ClassVar[tuple[str, ...]]  # the request's lists of turns, each held to `max_messages`

    def __init_subclass__(cls, *, route: str = "", path: str = "", history_key: str = "", asks_usage: bool = False,
                          reasks: bool = True, **kwargs: Any) -> None:
        """A route declares these in its class line, as the errors do (proxy/errors.py); a class that only shares
        pieces between routes (`StructuredDialect`) declares none."""
        super().__init_subclass__(**kwargs)
        cls.route, cls.path, cls.history_key = route, path, history_key
        cls.asks_usage, cls.reasks = asks_usage, reasks
        # A conversation a retry appends to is judged again turn by turn: its length is held to `max_messages`
        # on every route (a raw prompt's token ids are not turns).
        cls.counted_keys = tuple(dict.fromkeys(("messages", "input", *((history_key,) if reasks else ()))))

    # -- the request

    @abstractmethod
    def validate(self, payload: dict[str, Any]) -> None:
        """Raise BadRequest when the conversation field is missing or of the wrong type."""

    @abstractmethod
    def offered(self, payload: dict[str, Any]) -> set[str]:
        """The tool names the request offers; a call to any other is `unknown_tool`."""

    def schemas(self, payload: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The offered tools' schemas where content calls are typed by them (chat), else None."""
        return None

    def tools(self, payload: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, set[str]]:
        return self.schemas(payload), self.offered(payload)

    def history(self, payload: dict[str, Any]) -> list[Any]:
        """The conversation as a list the retry items can be appended to."""
        return list(payload.get(self.history_key) or [])

    @abstractmethod
    def conversation(self, payload: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The request's conversation as chat messages, for the session lineage (None: it has none)."""

    @abstractmethod
    def client_texts(self, payload: dict[str, Any]) -> Iterable[ClientText]:
        """The texts the client wrote about itself (`client_parts`, proxy/sessions/project_root.py), where the
        project root it states is read."""

    # -- a whole answer

    @abstractmethod
    def read_whole(self, ex: DialectExchange, obj: dict[str, Any]) -> Any:
        """What `judge_whole` judges of a whole answer (its calls, in order); raises ValueError, TypeError or
        AttributeError for a body that is not this route's answer."""

    def judge_whole(self, ex: DialectExchange, obj: dict[str, Any], found: Any) -> list[JudgedCall]:
        """A whole answer's calls judged (`found`: what `read_whole` read)."""
        return ex.judge(found) + ex.judge_text(self.text(obj))

    @abstractmethod
    def text(self, obj: dict[str, Any]) -> str:
        """The visible text of a whole response (the held turn's content in a retry)."""

    def retry_text(self, obj: dict[str, Any], found: Any) -> str | None:
        """The held turn's text, as the retry shows it to the model."""
        return self.text(obj)

    def usage(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        """A whole answer's usage object as chat usage (`prompt_tokens`, ...), which `Usage.add` reads."""
        raise NotImplementedError

    def set_usage(self, obj: dict[str, Any], usage: Usage) -> None:
        """Write the usage summed over the attempts into a response (the client pays for all of them)."""
        raise NotImplementedError

    def set_blocked(self, obj: dict[str, Any], text: str) -> None:
        """Turn a whole response into one plain text answer."""
        raise NotImplementedError

    def add_note(self, ex: DialectExchange, obj: dict[str, Any]) -> None:
        """A whole answer delivered after a refusal: give it the line that says what was refused
        (`Exchange.refusal_note`), where its text does not carry it already."""
        raise NotImplementedError

    def retry_items(self, turn: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`retry_messages`' chat turn (assistant with tool_calls, one tool message per call) in this route."""
        raise NotImplementedError

    def reply(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """What the client got, as chat messages, for the session lineage."""
        raise NotImplementedError

    def response_id(self, obj: dict[str, Any]) -> str | None:
        """The id a whole response gives the client to continue from (`previous_response_id`), if the API has one."""
        return None

    async def prepare(self, ex: DialectExchange) -> None:
        """Edit the request before its first attempt goes up (Responses: the id it continues from)."""
        return None

    def blocked_turn(self, ex: DialectExchange, obj: dict[str, Any], text: str) -> None:
        """Note a whole blocked turn's last attempt before its answer becomes the explanation (Responses)."""
        return None

    def chain(self, ex: DialectExchange, response_id: str | None) -> None:
        """Note what the id the client was given must continue from upstream (Responses)."""
        return None

    def delivered(self, ex: DialectExchange, read: WholeAttempt[Any], judged: list[JudgedCall],
                  attempt: int) -> Response:
        """The answer for a delivered attempt (its calls on record): a repaired call re-encoded from its judged
        arguments, the usage of every attempt, the upstream's bytes where nothing changed (observe mode)."""
        raise NotImplementedError

    async def complete(self, ex: DialectExchange) -> Response:
        """The whole-answer attempt loop of every route that re-asks: judge an attempt, deliver it, re-ask with
        the reasons within the budget, or end with the explaining answer (`BlockedTurn` where a call is due)."""
        record = ex.record
        judged: list[JudgedCall] = []
        obj: dict[str, Any] = {}
        for attempt in range(1, ex.budget + 2):
            record.attempts = attempt
            # An upstream error is already in the route's shape.
            read = await whole_attempt(ex, self.path, f"a {self.route} response",
                                       lambda obj: self.read_whole(ex, obj), self.usage)
            if isinstance(read, Response):
                return read
            obj = read.obj
            judged = self.judge_whole(ex, obj, read.found)
            outcome = await ex.settle(attempt, judged)
            if outcome is Outcome.DELIVER:
                return self.delivered(ex, read, judged, attempt)
            if outcome is Outcome.BLOCKED:
                break
            ex.extra_messages += self.retry_items(retry_messages(ex.policy, self.retry_text(obj, read.found), judged))
        text = blocked_message(ex.policy, judged, record.attempts)
        if ex.demands_call:
            return ex.error_response(BlockedTurn(text))
        self.blocked_turn(ex, obj, text)
        self.set_blocked(obj, text)
        self.set_usage(obj, record.usage)
        ex.remember(self.reply(obj), self.response_id(obj))  # the explanation is the turn the client holds now
        return judged_json(obj)

    # -- a stream

    @abstractmethod
    def stream(self, ex: DialectExchange) -> Relay:
        """A reader for this request's events, across its attempts."""

    # -- errors

    def error_response(self, exc: ProxyError) -> Response:
        """An error answer in this route's shape (OpenAI's by default)."""
        return error_response(exc)

    def broken_error_body(self, ex: DialectExchange, response: Any, exc: Exception) -> Response:
        """The answer when the upstream's error body itself broke off while read (`Exchange.broken_error_body`)."""
        return Exchange.broken_error_body(ex, response, exc)

    def protocol_error(self, ex: DialectExchange, exc: Exception) -> Response:
        """`broken_error_body` as an upstream protocol error (502) in this route's shape."""
        ex.record.fail("upstream_error", f"upstream failed: {exc}")
        return self.error_response(UpstreamProtocolError(f"upstream failed: {exc}"))

    # -- the request, served

    async def handle(self, request: Request, state: Services) -> Response:
        """The route's answer, streamed or whole; an error before the answer starts in the route's shape."""
        try:
            exchange: DialectExchange = await open_exchange(request, state, self, DialectExchange, dialect=self)
            await self.prepare(exchange)
            return await serve(exchange, path=self.path, relay=lambda ex, response: self.stream(ex).run(response),
                               whole=self.complete)
        except ProxyError as exc:
            return self.error_response(exc)


# The pieces a judged route declares, by what they do; `missing_pieces` checks them for every route of the table.
PIECES: dict[str, tuple[str, ...]] = {
    "request reading": ("validate", "offered", "conversation", "client_texts"),
    "call extraction, whole": ("read_whole", "text"),
    "call extraction, streamed": ("stream",),
    "token usage": ("usage",),
}
# What a route that re-asks declares beyond them; one that does not has its own `complete`.
REASK_PIECES: dict[str, tuple[str, ...]] = {
    "feedback and retry body": ("retry_items",),
    "re-encoding": ("delivered", "set_blocked", "set_usage", "reply", "add_note"),
}


def missing_pieces(kind: type[Dialect]) -> list[str]:
    """`piece: method` for each piece the route class does not declare (still the base class's, or abstract),
    and each class-line value it lacks; empty when the route is whole."""
    pieces = {**PIECES, **(REASK_PIECES if kind.reasks else {"its one-attempt answer": ("complete",)})}
    abstract: frozenset[str] = getattr(kind, "__abstractmethods__", frozenset())
    missing = [f"{piece}: {name}" for piece, names in pieces.items() for name in names
               if getattr(kind, name) is getattr(Dialect, name) or name in abstract]
    missing += [f"{name} (abstract)" for name in sorted(abstract) if not any(name in n for n in pieces.values())]
    missing += [f"class line: {name}" for name in ("route", "path", "history_key") if not getattr(kind, name, None)]
    return missing


class Relay(Protocol):
    """A route's stream reader: the first attempt's open upstream stream in, what the client gets out."""

    def run(self, response: Any) -> AsyncIterator[bytes]: ...


@dataclass
class DialectExchange(Exchange):
    """The Exchange of a judged route: retries append to the route's conversation field, errors are in its shape."""

    dialect: Dialect | None = None
    # What the id the client is given continues from upstream (Responses, proxy/sessions/response_chains.py): the
    # last attempt's response, and for a blocked turn what the client got in place of its calls.
    upstream_response_id: str | None = None
    answered: list[dict[str, Any]] = field(default_factory=list)

    @property
    def spec(self) -> Dialect:
        assert self.dialect is not None
        return self.dialect

    def body(self) -> bytes:
        if not self.extra_messages and not self.body_changed:
            return self.original_body
        full = self.full_payload()
        return self.edited_body(self.spec.history_key, self.spec.history(full) if self.extra_messages else [], full)

    def error_response(self, exc: ProxyError) -> Response:
        return self.spec.error_response(exc)

    def broken_error_body(self, response: Any, exc: Exception) -> Response:
        return self.spec.broken_error_body(self, response, exc)

    def remember(self, reply: list[dict[str, Any]], response_id: str | None = None) -> None:
        """Let the client's next request (this conversation plus what it got, or the response id it was given)
        continue this session."""
        self.spec.chain(self, response_id)
        if not reply:
            return
        # The conversation as hashed when the session was resolved; the reply's items before its last follow it.
        if self.state.sessions.remember(self.record.session, None, reply[-1], after=reply[:-1],
                                        response_id=response_id):
            self.commit_before_end = True
