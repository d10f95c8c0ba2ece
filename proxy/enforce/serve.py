"""A judged route's answer: streamed (the first attempt opened, then the route's relay) or whole."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import httpx
from starlette.responses import Response, StreamingResponse

from proxy import strict
from proxy.enforce.attempts import open_stream_attempt
from proxy.enforce.exchange import Exchange
from proxy.enforce.finish import finish_exchange

__all__ = ["event_stream", "judged_json", "serve"]


ExchangeT = TypeVar("ExchangeT", bound="Exchange")


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
        response = await whole(ex)
        await ex.continuation_durable()
        return response
    finally:
        finish_exchange(ex)


def event_stream(pieces: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(pieces, media_type="text/event-stream",
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


def judged_json(obj: dict[str, Any]) -> Response:
    """A whole answer as the proxy encodes what it judged (enforce mode, or changed by the proxy)."""
    return Response(strict.dumps(obj).encode(), status_code=200, media_type="application/json")
