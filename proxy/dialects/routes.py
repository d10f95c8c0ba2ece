"""Which other `/v1/*` routes reach the upstream: only those the policy lists in `passthrough_routes`.

Every route that can carry a model's tool call is judged by a handler of its own (`/v1/chat/completions`,
`/v1/completions`, `/v1/responses`, `/v1/messages`). Anything else under `/v1` is forwarded untouched, so it is
forwarded only when the operator says it cannot carry one: an unknown route (a newer vLLM endpoint, a batch or
file API, a stored-response lookup) is refused rather than becoming a way around the allowlist. The proxy's own
endpoints (`/health`, `/metrics`, `/policies`, `/stats/*`, `/dashboard`) live outside `/v1` and are never
forwarded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.dialects.chat import chat_completions
from proxy.dialects.completions import completions
from proxy.dialects.messages import anthropic_error, create_message
from proxy.dialects.responses import create_response
from proxy.errors import error_body
from proxy.logs import get_logger
from proxy.policy import LoadedPolicy
from proxy.policy.schema import DEFAULT_PASSTHROUGH_ROUTES
from proxy.services import Services

__all__ = [
    "DEFAULT_PASSTHROUGH_ROUTES", "JUDGED", "JUDGED_ROUTES", "ROUTE_NOT_ALLOWED", "passthrough_refusal", "route_listed",
]

ROUTE_NOT_ALLOWED = "route_not_allowed"
# The routes whose answers carry tool calls, each judged by its dialect's handler (POST); the one table the app
# mounts and the refusals name. Documented in docs/routes.md.
JUDGED: dict[str, Callable[[Request, Services], Awaitable[Response]]] = {
    "/v1/chat/completions": chat_completions,
    "/v1/completions": completions,
    "/v1/responses": create_response,
    "/v1/messages": create_message,
}
JUDGED_ROUTES = tuple(JUDGED)

log = get_logger("proxy.routes")


def route_listed(path: str, routes: Iterable[str]) -> bool:
    """A listed route matches itself and the paths below it, segment by segment (`/v1/models` matches
    `/v1/models/qwen`, not `/v1/models-x`)."""
    return any(path == route or path.startswith(route.rstrip("/") + "/") for route in routes)


def passthrough_refusal(method: str, path: str, policy: LoadedPolicy) -> JSONResponse | None:
    """None when `path` (the full path, `/v1/...`) may be forwarded, else the 403 to answer."""
    routes = policy.policy.passthrough_routes
    if _dot_segments(path):
        # The upstream client resolves `..` (`/v1/models/../files` is `/v1/files` upstream): no listed prefix
        # may carry a path past the list. Clients never need them; `%2e%2e` arrives here decoded.
        message = f"{method} {path} is not forwarded: `.` and `..` path segments are refused"
        return _refusal(path, message, policy)
    if route_listed(path, routes):
        return None
    message = (
        f"{method} {path} is not forwarded: the policy {policy.name!r} does not list it in `passthrough_routes` "
        f"(listed: {', '.join(routes) or 'none'}). Routes that can carry a tool call are judged: POST "
        f"{', '.join(JUDGED_ROUTES)}. To forward another route, add it to `passthrough_routes` in the policy file."
    )
    return _refusal(path, message, policy)


def _dot_segments(path: str) -> bool:
    return any(segment in (".", "..") for segment in path.split("/"))


def _refusal(path: str, message: str, policy: LoadedPolicy) -> JSONResponse:
    log.warning("passthrough.refused", path=path, policy=policy.name)
    if route_listed(path, ("/v1/messages",)):
        return anthropic_error(message, 403)  # Anthropic clients read Anthropic's error shape on their routes
    return JSONResponse(error_body(message, "permission_error", code=ROUTE_NOT_ALLOWED), status_code=403)
