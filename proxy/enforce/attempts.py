"""One upstream attempt of an exchange, whole or streamed, opened and checked: what the upstream answered
that is not relayed, and what the client gets instead."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx
from starlette.responses import Response

from proxy import strict
from proxy.enforce.exchange import Exchange
from proxy.enforce.finish import finish_exchange
from proxy.errors import ClientGone, ProxyError, UpstreamUnjudgeable
from proxy.upstream.client import response_headers

__all__ = ["RetryFailed", "WholeAttempt", "open_retry_stream", "open_stream_attempt", "refused_status",
           "refused_stream", "request_attempt", "whole_attempt"]


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
