"""The /v1/* routes that carry no tool call (the policy's passthrough_routes): forwarded as they are,
streamed back as they come. The routes that can carry a tool call have modules of their own."""

from __future__ import annotations

from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from proxy import telemetry
from proxy.enforce.payload import read_body
from proxy.errors import ProxyError
from proxy.logs import get_logger
from proxy.services import Services
from proxy.upstream.client import response_headers

__all__ = ["forward", "list_models"]

log = get_logger("proxy.dialects.passthrough")


async def list_models(request: Request, state: Services, headers: dict[str, str]) -> Response:
    """`headers`: what goes upstream (`Services.upstream_headers`)."""
    answer = await state.models.fetch(headers)
    return Response(answer.body, status_code=answer.status, media_type=answer.content_type)


async def forward(request: Request, state: Services, path: str, headers: dict[str, str]) -> Response:
    """`headers`: what goes upstream (`Services.upstream_headers`)."""
    body = await read_body(request, state.settings.http.max_body_bytes)
    response = await state.upstream.open_stream(request.method, path, headers=headers, content=body or None,
                                                params=request.query_params)
    telemetry.emit(telemetry.PassthroughAnswered(path, response.status_code))
    upstream = state.upstream

    async def relay() -> Any:
        try:
            async for chunk in upstream.iter_bytes(response):
                yield chunk
        except ProxyError as exc:
            log.warning("passthrough.broken", path=path, error=exc.message)
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    return StreamingResponse(relay(), status_code=response.status_code,
                             headers=response_headers(response.headers))
