"""Exceptions turned into the one OpenAI-style error shape at the HTTP edge: the app's handlers, and a route
class for routers that must answer in that shape on whatever app includes them (the stats routes)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import ClientDisconnect

from proxy.errors import ProxyError, error_body, error_response
from proxy.logs import get_logger
from proxy.store.db import translate_db_error

__all__ = ["ShapedErrorRoute", "install_error_handlers"]

log = get_logger("proxy.http.error_handlers")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ProxyError)
    async def _proxy_error(_request: Request, exc: ProxyError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(ClientDisconnect)
    async def _client_left(_request: Request, _exc: ClientDisconnect) -> Response:
        return Response(status_code=499)  # nobody reads it; the connection is gone

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("request.unexpected_error", error=str(exc))
        return JSONResponse(error_body("internal proxy error", "internal_error"), status_code=500)


class ShapedErrorRoute(APIRoute):
    """A route that answers a ProxyError (its dependencies' too, e.g. `require_admin`) and a database error in
    the error shape itself, not through the app's exception handlers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def shaped(request: Request) -> Response:
            try:
                return await handle(request)
            except ProxyError as exc:
                return error_response(exc)
            except SQLAlchemyError as exc:
                return error_response(translate_db_error(exc))

        return shaped
