"""One exception base for the proxy, and the one OpenAI-style error shape it answers with.

    ProxyError
     ├── BadRequest            400  invalid_request_error
     ├── PayloadTooLarge       413  invalid_request_error
     ├── ModelNotFound         404  model_not_found
     ├── Forbidden             403  permission_error
     ├── Unauthorized          401  authentication_error
     ├── UpstreamUnavailable   502  upstream_error
     ├── UpstreamTimeout       504  upstream_timeout
     ├── UpstreamProtocolError 502  upstream_error
     │    └── UpstreamUnjudgeable  502  upstream_error, code `unjudgeable` (output refused in enforce mode)
     ├── BlockedTurn           422  tool_call_blocked (a request that demands a tool call, its retry budget spent)
     ├── StoreUnavailable      503  store_unavailable (enforce mode: nothing is released unrecorded)
     └── ClientGone            499  client_disconnected (the client left; nobody reads the answer)
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

__all__ = [
    "BadRequest",
    "BlockedTurn",
    "ClientGone",
    "Forbidden",
    "ModelNotFound",
    "PayloadTooLarge",
    "ProxyError",
    "StoreUnavailable",
    "Unauthorized",
    "UpstreamProtocolError",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "UpstreamUnjudgeable",
    "error_body",
    "error_response",
]


def error_body(message: str, type_: str, *, code: str | int | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class ProxyError(Exception):
    """The base: a subclass declares its answer in its class line, `class X(ProxyError, status_code=404, ...)`."""

    status_code = 500
    error_type = "internal_error"
    code: str | None = None

    def __init_subclass__(cls, *, status_code: int | None = None, error_type: str | None = None,
                          code: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if status_code is not None:
            cls.status_code = status_code
        if error_type is not None:
            cls.error_type = error_type
        if code is not None:
            cls.code = code

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.error_type, code=self.code, param=self.param)


class BadRequest(ProxyError, status_code=400, error_type="invalid_request_error"): ...
class PayloadTooLarge(ProxyError, status_code=413, error_type="invalid_request_error", code="request_too_large"): ...
class ModelNotFound(ProxyError, status_code=404, error_type="invalid_request_error", code="model_not_found"): ...
class Forbidden(ProxyError, status_code=403, error_type="permission_error"): ...
class Unauthorized(ProxyError, status_code=401, error_type="authentication_error"): ...
class UpstreamUnavailable(ProxyError, status_code=502, error_type="upstream_error", code="upstream_unreachable"): ...
class UpstreamTimeout(ProxyError, status_code=504, error_type="upstream_timeout", code="upstream_timeout"): ...
class UpstreamProtocolError(ProxyError, status_code=502, error_type="upstream_error",
                            code="upstream_protocol_error"): ...
# 422, not 5xx or 429: the SDKs raise it with its message at once instead of retrying the same request.
class BlockedTurn(ProxyError, status_code=422, error_type="tool_call_blocked", code="tool_call_blocked"): ...
class StoreUnavailable(ProxyError, status_code=503, error_type="store_unavailable", code="store_unavailable"): ...
class ClientGone(ProxyError, status_code=499, error_type="client_disconnected", code="client_disconnected"): ...


class UpstreamUnjudgeable(UpstreamProtocolError, code="unjudgeable"):
    """The upstream answered something the proxy will not relay: a body or event that does not parse, a
    status other than 200 on success, a redirect."""


def error_response(exc: ProxyError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status_code)
