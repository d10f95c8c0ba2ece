"""One client request as it crosses the proxy, whatever its route: what was asked, under which
policy, the upstream attempts made for it, and its end."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import anyio
import httpx
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from proxy.enforce.actions import judge_output
from proxy.enforce.body_splice import splice_body
from proxy.enforce.feedback_turns import turn_allowed
from proxy.enforce.judging import JudgedCall, request_tools
from proxy.enforce.record import RequestRecord
from proxy.enforce.text_clients import TextClient, judge_text, recognise, ungoverned_reasons
from proxy.enforce.tool_choice import demands_call
from proxy.errors import (
    BadRequest,
    ClientGone,
    ProxyError,
    StoreUnavailable,
    UpstreamUnjudgeable,
    error_response,
)
from proxy.http.body import gc_paused, read_body, read_json_object
from proxy.logs import get_logger
from proxy.policy import LoadedPolicy
from proxy.policy.profiles import ToolSet
from proxy.services import Services
from proxy.sessions.project_root import stated_root
from proxy.stats.prometheus import BUDGET_EXHAUSTED, RETRIES, TOOL_CALLS, UNGOVERNED_TEXT
from proxy.stats.prometheus_feed import LOOP_TRACKER
from proxy.store.recorder import queue_calls, release_calls
from proxy.toolcalls import ToolCall
from proxy.toolcalls.families import XmlRules
from proxy.toolcalls.registry import TEXT_FORMATS
from proxy.upstream import strict
from proxy.upstream.client import response_headers

__all__ = ["Exchange", "Outcome", "RetryFailed", "RouteShape", "WholeAttempt", "end_stream", "event_stream",
           "finish_exchange", "judged_json", "normalize_stream", "open_exchange", "open_retry_stream",
           "open_stream_attempt", "pick_policy", "refused_status", "refused_stream", "request_attempt", "serve",
           "whole_attempt"]

T = TypeVar("T")
ExchangeT = TypeVar("ExchangeT", bound="Exchange")

log = get_logger("proxy.enforce.exchange")


class Outcome(StrEnum):
    """What happens after an attempt whose calls were judged."""

    DELIVER = "deliver"
    RETRY = "retry"
    BLOCKED = "blocked"


@dataclass(kw_only=True)
class Exchange:
    """One client request: what was asked, under which policy, and what has happened so far."""

    state: Services
    record: RequestRecord
    payload: dict[str, Any]
    original_body: bytes
    body_changed: bool
    headers: dict[str, str]
    policy: LoadedPolicy
    tools: list[dict[str, Any]] | None
    offered: set[str]
    client_wants_usage: bool
    extra_messages: list[dict[str, Any]] = field(default_factory=list)
    # The client's request, watched for a disconnect while an upstream attempt is awaited whole (no
    # response started yet); None where nobody watches (tests, the CLI).
    client: Request | None = None
    client_left: bool = False
    # The request's tool profiles and project root (proxy/policy/profiles.py), chosen once per request.
    toolset: ToolSet | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        stated = self.state.sessions.project_root(self.record.session, stated_root(self.client_texts()))
        self.toolset = request_tools(self.policy, self.record, self.payload, self.headers,
                                     root_header=getattr(self.state.settings, "project_root_header", None),
                                     stated_root=stated)
    conversation: list[dict[str, Any]] | None = None  # the request's conversation as chat messages (lineage)

    def client_texts(self) -> Iterable[str]:
        """The texts the client wrote about itself in this request (proxy/sessions/project_root.py)."""
        return ()

    @property
    def enforce(self) -> bool:
        return self.policy.policy.mode == "enforce"

    @property
    def budget(self) -> int:
        return max(0, int(self.policy.policy.retry_budget))

    @functools.cached_property
    def text_client(self) -> TextClient | None:
        """The text-acting client this request comes from (text_clients.py), recognised by what it wrote."""
        return recognise(self.conversation or [])

    @property
    def acts_on_text(self) -> bool:
        """The client runs actions written in the text: a turn's text is held until judged, as a call is."""
        return self.text_client is not None and bool(self.text_client.formats)

    def judge_text(self, text: str) -> list[JudgedCall]:
        """The verdicts of the actions a text-acting client would run from this assistant text; what it would
        run unjudged is counted (`allowlist_proxy_ungoverned_text_actions_total`) and logged."""
        client = self.text_client
        if client is None or not text:
            return []
        reasons = ungoverned_reasons(client, text)
        if reasons:
            UNGOVERNED_TEXT.labels(self.record.model, client.name).inc()
            log.warning("text_actions.ungoverned", client=client.name, reasons=reasons, session=self.record.session.id)
        return judge_text(self.policy, client, text, tools=self.toolset, session_id=self.record.session.id)

    def text_unjudged(self, text: str) -> None:
        """A route that does not judge text actions yet (Responses, Messages): a text-acting client's actions
        there are counted ungoverned, never passed unseen."""
        client = self.text_client
        if client is not None and client.formats and any(TEXT_FORMATS[f].read(text).calls for f in client.formats):
            UNGOVERNED_TEXT.labels(self.record.model, client.name).inc()
            log.warning("text_actions.ungoverned", client=client.name, reasons=["route does not judge text actions"],
                        session=self.record.session.id)

    @property
    def demands_call(self) -> bool:
        """The request demands a tool call: a blocked turn ends in an error, not a text answer (tool_choice.py)."""
        return demands_call(self.payload)

    @property
    def scan_content(self) -> bool:
        # A request that offers no tools cannot run one; text that merely looks like a call is left alone.
        return bool(self.offered)

    @property
    def rules(self) -> XmlRules | None:
        """How raw XML in content is read: as the upstream's vLLM version family would."""
        return self.state.vllm.current() if self.state.vllm is not None else None

    def body(self) -> bytes:
        if not self.extra_messages and not self.body_changed:
            return self.original_body
        return self.edited_body("messages", list(self.payload["messages"]) if self.extra_messages else [])

    def edited_body(self, key: str, history: list[Any]) -> bytes:
        """The client's bytes with the proxy's changes spliced in (proxy/enforce/body_splice.py): every message
        the client sent goes upstream byte for byte; a body that cannot be edited in place is re-encoded."""
        spliced = splice_body(self.original_body, self.payload, key, history, self.extra_messages)
        if spliced is not None:
            return spliced
        payload = dict(self.payload)
        if self.extra_messages:
            payload[key] = history + self.extra_messages
        return json.dumps(payload, ensure_ascii=False).encode()

    def judge(self, calls: list[ToolCall]) -> list[JudgedCall]:
        # With the policy's opt-in `repair:`: every relay that judges here delivers the judged call objects
        # re-encoded (proxy/enforce/judging.py), never the upstream's bytes for a repaired call. Raw completions,
        # whose calls are the model's own text, judges without repair (proxy/dialects/completions.py).
        return judge_output(self.policy, calls, self.offered, tools=self.toolset,
                            session_id=self.record.session.id, repair=True)

    def error_response(self, exc: ProxyError) -> Response:
        """An error answer for the client in this route's shape (OpenAI's; the Messages API has its own)."""
        return error_response(exc)

    def broken_error_body(self, response: httpx.Response, exc: Exception) -> Response:
        """The answer when the upstream's error body itself broke off while read: its status, with an error
        body of the proxy's (the request on record as that error)."""
        content = json.dumps({"error": {"message": f"upstream failed: {exc}", "type": "upstream_error",
                                        "param": None, "code": None}}).encode()
        self.record.fail("upstream_error", content.decode("utf-8", "replace")[:1000])
        return Response(content, status_code=response.status_code, headers=response_headers(response.headers))

    def refuse(self, exc: ProxyError) -> Response:
        """The upstream's answer is not relayed: the client gets an error, the request is an upstream error."""
        self.record.fail("upstream_error", exc.message[:1000], exc.status_code)
        return self.error_response(exc)

    def keep(self, attempt: int, judged: list[JudgedCall], *, delivered: bool) -> None:
        if log.is_enabled_for(logging.DEBUG):
            log.debug("attempt", request_id=self.record.id, attempt=attempt, delivered=delivered,
                      verdicts=[{"tool": j.call.name, **j.verdict.as_dict()} for j in judged])
        """Queue an attempt's calls for the store without waiting (held back, or recorded after the fact)."""
        queue_calls(self.state.writer, self.record, self.policy, attempt, judged, delivered=delivered,
                    tools=self.toolset)
        self._count(judged)

    async def release(self, attempt: int, judged: list[JudgedCall]) -> None:
        """The release point: returns once the calls about to be delivered are on record (enforce mode), or
        raises StoreUnavailable (503) when they cannot be and `on_store_failure` is `refuse`."""
        settings = self.state.settings
        try:
            await release_calls(self.state.writer, self.record, self.policy, attempt, judged,
                                on_store_failure=settings.on_store_failure,
                                timeout=settings.store_release_timeout_seconds, tools=self.toolset)
        finally:
            self._count(judged)

    async def settle(self, attempt: int, judged: list[JudgedCall]) -> Outcome:
        """Records an attempt's verdicts and says what follows under the policy's mode and budget:
        DELIVER (observe mode, or every call allowed), RETRY (budget left) or BLOCKED (budget spent).

        DELIVER returns only once the calls are on record (audit before release, enforce mode); when the store
        cannot record them and `on_store_failure` is `refuse`, raises StoreUnavailable instead."""
        if not self.enforce or turn_allowed(judged):
            await self.release(attempt, judged)
            return Outcome.DELIVER
        self.keep(attempt, judged, delivered=False)
        if attempt > self.budget:
            self.record.budget_exhausted = True
            self.record.note_blocked(judged)
            BUDGET_EXHAUSTED.labels(self.record.model).inc()
            return Outcome.BLOCKED
        RETRIES.labels(self.record.model).inc()
        return Outcome.RETRY

    def settle_truncated(self, attempt: int, judged: list[JudgedCall]) -> None:
        """A stream that ended without a finish (no finish_reason, or no [DONE] / completed event): an upstream
        error. The calls it completed are judged and recorded as not delivered; the relay sends the client an
        error event instead of them."""
        self.keep(attempt, judged, delivered=False)
        self.record.fail("upstream_error", "the upstream stream ended without a finish")

    def _count(self, judged: list[JudgedCall]) -> None:
        record, loop_min = self.record, self.policy.policy.loop_min_attempts
        for item in judged:
            verdict = item.verdict
            TOOL_CALLS.labels(record.model, verdict.decision, verdict.reasons[0] if verdict.reasons else "").inc()
            LOOP_TRACKER.observe(record.session.id, record.model, verdict, loop_min)

    async def unless_client_leaves(self, start: Callable[[], Awaitable[T]]) -> T:
        """Await `start()` (an upstream attempt) unless the client disconnects first: then the attempt is cancelled
        at once (httpx closes the upstream connection, so the server stops generating), the record says
        `client_disconnected` and ClientGone (499) is raised, so no retry starts either."""
        if self.client is None:
            return await start()
        if not self.client_left:
            watcher = asyncio.ensure_future(_disconnected(self.client))
            await asyncio.sleep(0)  # a disconnect already known ends the watcher before anything is sent
            if not watcher.done():
                work = asyncio.ensure_future(start())
                try:
                    await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not work.done() and not watcher.done():  # we were cancelled ourselves
                        work.cancel()
                    watcher.cancel()
                if work.done():
                    return work.result()
                work.cancel()
                with contextlib.suppress(BaseException):
                    await work
            self.client_left = True
        self.record.fail("client_disconnected", "the client went away before the answer", 499)
        raise ClientGone("the client went away before the answer")


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


class RouteShape(Protocol):
    """What the request prelude reads of a judged route: `Dialect` (proxy/dialects/base.py), the one shape of a
    judged route, has these; the rest is `open_exchange`."""

    route: ClassVar[str]  # the `route` recorded with every request and call
    asks_usage: ClassVar[bool]  # streams get `stream_options.include_usage` (the statistics count tokens)
    counted_keys: ClassVar[tuple[str, ...]]  # the request's lists of turns, each held to `max_messages`

    def validate(self, payload: dict[str, Any]) -> None:
        """Raise BadRequest for a malformed conversation."""

    def conversation(self, payload: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The conversation as chat messages, for the lineage."""

    def tools(self, payload: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, set[str]]:
        """The offered tools' schemas (where content calls are typed by them) and names."""


async def open_exchange(request: Request, state: Services, shape: RouteShape,
                        make: Callable[..., Exchange] | None = None, **extra: Any) -> Any:
    """The one request prelude of every judged route: the body read and checked, the model resolved, the
    policy and the session picked, the `stream` decided, the request counted in and its record begun."""
    body = await read_body(request, state.settings.max_body_bytes)
    # A large body is parsed in a thread: tens of megabytes of JSON would stall every other client's stream.
    # Counted there too, so that a refused request's objects are also freed off the loop.
    limits: dict[str, Any] = {"max_tools": state.settings.max_tools, "max_messages": state.settings.max_messages,
                              "counted": shape.counted_keys}
    payload = _read_payload(body, **limits) if len(body) < _PARSE_INLINE_BYTES else \
        await asyncio.to_thread(_read_large_payload, body, **limits)
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("`model` must be a non-empty string", param="model")
    shape.validate(payload)
    headers = state.upstream.headers(request.headers)
    upstream_model = await state.models.resolve(model, headers)
    policy = pick_policy(request, state)
    conversation = shape.conversation(payload)
    session = await state.sessions.aresolve(request.headers, conversation, payload)  # replicas share the lineage
    stream, changed = normalize_stream(payload)
    if upstream_model != model:
        payload["model"] = upstream_model
        changed = True
    options = payload.get("stream_options")
    client_wants_usage = isinstance(options, dict) and options.get("include_usage") is True
    if shape.asks_usage and stream and not client_wants_usage:
        # Usage is what the statistics count; the client that did not ask never sees it.
        payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        changed = True
    tools, offered = shape.tools(payload)
    record = RequestRecord(session=session, model=upstream_model, route=shape.route, upstream=state.upstream.base_url,
                           stream=stream, concurrency=state.enter(upstream_model))
    record.policy_name, record.policy_hash, record.mode = policy.name, policy.hash, policy.policy.mode
    return (make or Exchange)(state=state, record=record, payload=payload, original_body=body, body_changed=changed,
                              headers=headers, policy=policy, tools=tools, offered=offered,
                              client_wants_usage=client_wants_usage, conversation=conversation, client=request,
                              **extra)


_PARSE_INLINE_BYTES = 1 << 20


def _read_payload(body: bytes, *, max_tools: int, max_messages: int, counted: tuple[str, ...]) -> dict[str, Any]:
    payload = read_json_object(body)
    check_counts(payload, max_tools=max_tools, max_messages=max_messages, counted=counted)
    return payload


def _read_large_payload(body: bytes, *, max_tools: int, max_messages: int, counted: tuple[str, ...]) -> dict[str, Any]:
    # Parsed JSON holds no reference cycles, yet its hundreds of thousands of new objects set off the
    # cyclic collector, which holds the GIL (and so every client's stream) for a full pass: 300 ms for 35 MB.
    with gc_paused():
        return _read_payload(body, max_tools=max_tools, max_messages=max_messages, counted=counted)


def check_counts(payload: dict[str, Any], *, max_tools: int, max_messages: int,
                 counted: tuple[str, ...] = ("messages", "input")) -> None:
    """400 for a request offering more tools or carrying more messages than the settings allow: the work of
    judging a request grows with both, and one request must not hold the proxy for everyone else."""
    tools = payload.get("tools")
    if isinstance(tools, list) and len(tools) > max_tools:
        raise BadRequest(f"the request offers {len(tools)} tools; the limit is {max_tools} (setting max_tools)",
                         param="tools")
    for key in counted:
        items = payload.get(key)
        if isinstance(items, list) and len(items) > max_messages:
            raise BadRequest(f"the request carries {len(items)} {key}; the limit is {max_messages} "
                             "(setting max_messages)", param=key)


# pydantic's lax booleans, which vLLM applies to `stream`: the proxy must read the value as vLLM will.
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def normalize_stream(payload: dict[str, Any]) -> tuple[bool, bool]:
    """Whether the request streams, and whether `payload["stream"]` had to be rewritten to say so as a bool.

    The proxy decides streamed or whole itself and sends the upstream that decision, so a `"true"` or `1`
    can never make the proxy read a whole body while the upstream streams."""
    value = payload.get("stream")
    if value is None or isinstance(value, bool):
        return value is True, False
    text = str(value).strip().lower() if isinstance(value, str | int | float) else None
    if isinstance(value, float) and value in (0.0, 1.0):
        text = str(int(value))
    if text in _TRUE or text in _FALSE:
        payload["stream"] = text in _TRUE
        return payload["stream"], True
    raise BadRequest(f"`stream` must be a boolean (got {json.dumps(value)[:50]})", param="stream")


def refused_status(status: int) -> UpstreamUnjudgeable | None:
    """A success that is not a plain 200 (201, 203, 206 ...) or a redirect is not relayed: its body is not the
    answer the proxy knows how to judge, and a client may follow a redirect to output nobody judged."""
    if status == 200 or status >= 400:
        return None
    return UpstreamUnjudgeable(f"unjudgeable: upstream answered HTTP {status}; the proxy relays only 200 or errors")


def refused_stream(response: httpx.Response) -> UpstreamUnjudgeable | None:
    """`refused_status` for a streamed request, and a 200 that is not an event stream: the proxy would find no
    event in it to judge, while a client might read it as a whole answer."""
    if response.status_code == 200:
        kind = response.headers.get("content-type", "")
        if kind.split(";", 1)[0].strip().lower() == "text/event-stream":
            return None
        return UpstreamUnjudgeable(f"unjudgeable: upstream answered a streamed request with {kind[:80]!r}, "
                                   "not an event stream")
    return refused_status(response.status_code)


def pick_policy(request: Request, state: Services) -> LoadedPolicy:
    """The one policy-selection rule: the main policy, unless `policy_header` is on and the request's
    `x-allowlist-policy` header names another loaded policy (a name none has is a 400)."""
    manager = state.policies
    wanted = request.headers.get("x-allowlist-policy")
    chosen = manager.current()
    if wanted and state.settings.policy_header:
        found = manager.get(wanted)
        if found is None:
            raise BadRequest(f"x-allowlist-policy names no loaded policy: {wanted!r}", param="x-allowlist-policy")
        chosen = found
    _refuse_when_store_down(state, chosen)
    return chosen


def _refuse_when_store_down(state: Services, policy: LoadedPolicy) -> None:
    """Enforce mode with `on_store_failure: refuse`: while the store cannot record, no request starts (the GPU
    would answer for nothing the client may receive)."""
    if policy.policy.mode != "enforce" or state.settings.on_store_failure != "refuse":
        return
    if (reason := state.writer.health()) is not None:
        raise StoreUnavailable(f"the proxy cannot record calls now, so it serves none: {reason}")


def finish_exchange(ex: Exchange) -> None:
    """Ends the exchange's request through `Services.finish`, the one place a request ends.

    Called from `finally` blocks: when an exception is on its way to the client, the record says what the
    client will get (its status and error), not what the upstream had answered."""
    _note_exception(ex.record, sys.exc_info()[1])
    ex.state.finish(ex.record)


async def request_attempt(ex: Exchange, path: str) -> httpx.Response | Response:
    """One whole upstream attempt: the upstream's 200 response, or the answer for the client when the
    upstream refused (its error body and status, passed on as they are)."""
    record = ex.record
    try:
        response = await ex.unless_client_leaves(
            lambda: ex.state.upstream.request("POST", path, headers=ex.headers, content=ex.body()))
    except ClientGone:
        raise
    except ProxyError as exc:
        record.fail("upstream_error", exc.message, exc.status_code)
        raise
    record.mark_first_byte()
    record.status = response.status_code
    refused = refused_status(response.status_code) if ex.enforce else None
    if refused is not None:
        return ex.refuse(refused)
    if response.status_code != 200:
        record.fail("upstream_error", response.text[:1000])
        return Response(response.content, status_code=response.status_code,
                        headers=response_headers(response.headers))
    return response


FoundT = TypeVar("FoundT")


@dataclass(kw_only=True, frozen=True)
class WholeAttempt(Generic[FoundT]):
    """A whole upstream attempt that answered 200 with a JSON object, read."""

    response: httpx.Response
    headers: dict[str, str]  # the upstream's, as a relayed answer carries them
    obj: dict[str, Any]
    found: FoundT  # what the route's reader took from `obj` (its calls)


async def whole_attempt(ex: Exchange, path: str, what: str, read: Callable[[dict[str, Any]], FoundT],
                        usage: Callable[[Any], Any] = lambda usage: usage) -> WholeAttempt[FoundT] | Response:
    """One whole upstream attempt, parsed (strictly in enforce mode) and read by `read`; its usage (through
    `usage`, the route's usage as chat usage) counted. Or the answer for the client: the upstream's refusal, or
    a body that is not `what` - refused in enforce mode, relayed as it came (and recorded) in observe mode."""
    response = await request_attempt(ex, path)
    if isinstance(response, Response):
        return response
    headers = response_headers(response.headers)
    try:
        obj = strict.loads(response.content) if ex.enforce else json.loads(response.content)
        if not isinstance(obj, dict):
            raise TypeError(f"a JSON {type(obj).__name__}")
        found = read(obj)
    except (ValueError, TypeError, AttributeError) as exc:
        detail = f"upstream answered 200 with a body that is not {what}: {exc}"
        if ex.enforce:
            return ex.refuse(UpstreamUnjudgeable(f"unjudgeable: {detail}"))
        ex.record.fail("upstream_error", detail)
        return Response(response.content, status_code=200, headers=headers)
    ex.record.usage.add(usage(obj.get("usage")))
    ex.record.mark_first_token()
    return WholeAttempt(response=response, headers=headers, obj=obj, found=found)


def judged_json(obj: dict[str, Any]) -> Response:
    """A whole answer as the proxy encodes what it judged (enforce mode, or changed by the proxy)."""
    return Response(strict.dumps(obj).encode(), status_code=200, media_type="application/json")


async def serve(ex: ExchangeT, *, path: str, relay: Callable[[ExchangeT, httpx.Response], AsyncIterator[bytes]],
                whole: Callable[[ExchangeT], Awaitable[Response]]) -> Response:
    """A judged route's answer. Streamed: the first attempt opened (`open_stream_attempt`), then `relay` reads it
    and what follows, and ends the exchange when the stream ends (`end_stream`). Whole: `whole`, the exchange
    ended here."""
    if ex.record.stream:
        response = await open_stream_attempt(ex, path)
        if isinstance(response, Response):
            return response
        return event_stream(relay(ex, response))
    try:
        return await whole(ex)
    finally:
        finish_exchange(ex)


def event_stream(pieces: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(pieces, media_type="text/event-stream",
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


async def open_stream_attempt(ex: Exchange, path: str) -> httpx.Response | Response:
    """The first attempt of a streamed exchange, opened: the streaming 200 response (the caller closes
    it), or the finished exchange's answer for the client when the upstream refused."""
    record = ex.record

    def start() -> Awaitable[httpx.Response]:
        return ex.state.upstream.open_stream("POST", path, headers=ex.headers, content=ex.body())

    try:
        response = await ex.unless_client_leaves(start)  # a client gone while it opens cancels it, every route
    except ClientGone:
        finish_exchange(ex)
        raise
    except ProxyError as exc:
        record.fail("upstream_error", exc.message, exc.status_code)
        finish_exchange(ex)
        raise
    record.status = response.status_code
    refused = refused_stream(response) if ex.enforce else None
    if response.status_code == 200 and refused is None:
        return response
    if refused is not None:
        await response.aclose()
        answer = ex.refuse(refused)
        finish_exchange(ex)
        return answer
    try:
        content = await response.aread()
    except Exception as exc:  # the error body itself broke off (httpx's error, not yet translated)
        answer = ex.broken_error_body(response, exc)
        finish_exchange(ex)
        return answer
    finally:
        await response.aclose()
    record.fail("upstream_error", content.decode("utf-8", "replace")[:1000])
    finish_exchange(ex)
    return Response(content, status_code=response.status_code, headers=response_headers(response.headers))


@dataclass(kw_only=True, frozen=True)
class RetryFailed:
    """A retry's stream that could not be opened or was refused: the error event the client gets, and what the
    record says (its error, and the upstream's status where it answered one)."""

    message: str
    error_type: str
    code: Any
    detail: str
    status: int | None = None


async def open_retry_stream(ex: Exchange, path: str) -> httpx.Response | RetryFailed:
    """A retry of a streamed exchange, opened (inside the stream the client already has: a failure becomes an
    error event, never an HTTP answer)."""
    try:
        response = await ex.state.upstream.open_stream("POST", path, headers=ex.headers, content=ex.body())
    except ProxyError as exc:
        return RetryFailed(message=exc.message, error_type=exc.error_type, code=exc.code, detail=exc.message)
    refused = refused_stream(response) if ex.enforce and response.status_code == 200 else None
    if refused is not None:
        return RetryFailed(message=refused.message, error_type=refused.error_type, code=refused.code,
                           detail=refused.message)
    if response.status_code != 200:
        content = (await response.aread()).decode("utf-8", "replace")
        return RetryFailed(message=f"upstream answered {response.status_code} on retry: {content[:500]}",
                           error_type="upstream_error", code=None, detail=content[:1000], status=response.status_code)
    return response


async def end_stream(ex: Exchange, *, done: bool, upstream: httpx.Response | None,
                     then: Callable[[], None] | None = None) -> None:
    """The end of a streamed exchange, however it came (call it from `finally`): a client that left before the
    end is on record as such; then, shielded from the cancellation, the upstream closed, `then` (what the
    route still records) and the request ended."""
    if not done and ex.record.outcome == "ok":
        ex.record.fail("client_disconnected", "the client went away before the stream ended", 499)
    with anyio.CancelScope(shield=True):
        if upstream is not None:
            await upstream.aclose()
        if then is not None:
            then()
        finish_exchange(ex)


def _note_exception(record: RequestRecord, exc: BaseException | None) -> None:
    if exc is None or record.saved or isinstance(exc, ClientGone | StoreUnavailable):
        return  # nothing in flight, or already recorded as what it is
    if isinstance(exc, ProxyError):
        outcome = "upstream_error" if record.outcome == "ok" and exc.status_code >= 500 else record.outcome
        record.fail(outcome, exc.message, exc.status_code)
    elif isinstance(exc, Exception):
        record.fail("internal_error", f"{type(exc).__name__}: {str(exc)[:500]}", 500)
