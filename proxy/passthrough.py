"""Every other /v1/* request: forwarded as it is, streamed back as it comes, recorded."""

from __future__ import annotations

import json
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from proxy.body import read_body
from proxy.errors import ProxyError
from proxy.logs import get_logger
from proxy.metrics import REQUESTS
from proxy.record import RequestRecord
from proxy.state import ProxyState
from proxy.upstream import response_headers

__all__ = ["forward", "list_models"]


def _usage_from(record: RequestRecord, body: bytes) -> None:
    if not body:
        return
    try:
        payload = json.loads(body)
    except ValueError:
        return
    if isinstance(payload, dict):
        record.usage.add(payload.get("usage"))


log = get_logger("proxy.passthrough")


async def list_models(request: Request, state: ProxyState) -> Response:
    headers = state.upstream.headers(request.headers)
    answer = await state.models.fetch(headers)
    return Response(answer.body, status_code=answer.status, media_type=answer.content_type)


def _record_for(request: Request, state: ProxyState, path: str, body: bytes) -> RequestRecord | None:
    """Raw completions are recorded like chat requests; other routes carry no model traffic."""
    if path != "/completions" or request.method != "POST":
        return None
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    model = str(payload.get("model") or "")
    session = state.sessions.resolve(request.headers, None)
    return RequestRecord(session=session, model=model, route="completions", upstream=state.upstream.base_url,
                         stream=payload.get("stream") is True, concurrency=state.enter(model))


async def forward(request: Request, state: ProxyState, path: str) -> Response:
    body = await read_body(request, state.settings.max_body_bytes)
    headers = state.upstream.headers(request.headers)
    record = _record_for(request, state, path, body)
    try:
        response = await state.upstream.open_stream(request.method, path, headers=headers, content=body or None,
                                                    params=request.query_params)
    except ProxyError as exc:
        if record is not None:
            record.fail("upstream_error", exc.message, exc.status_code)
            state.finish(record)
        raise
    REQUESTS.labels(record.model if record else "", path, str(response.status_code)).inc()
    upstream = state.upstream
    if record is not None:
        record.status = response.status_code
        record.mark_first_byte()

    async def relay() -> Any:
        collected = bytearray()
        finished = False
        try:
            async for chunk in upstream.iter_bytes(response):
                if record is not None and not record.stream and len(collected) < 1_000_000:
                    collected += chunk
                yield chunk
            finished = True
        except ProxyError as exc:
            log.warning("passthrough.broken", path=path, error=exc.message)
            if record is not None:
                record.fail("upstream_error", exc.message)
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()
                if record is not None:
                    if not finished and record.outcome == "ok":
                        record.fail("client_disconnected", "the client went away", 499)
                    if response.status_code >= 400 and record.outcome == "ok":
                        record.fail("upstream_error", collected[:1000].decode("utf-8", "replace"))
                    _usage_from(record, bytes(collected))
                    state.finish(record)

    return StreamingResponse(relay(), status_code=response.status_code,
                             headers=response_headers(response.headers))
