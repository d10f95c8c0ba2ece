"""The judged route table (`JUDGED`), and which other `/v1/*` routes reach the upstream: only those the policy
lists in `passthrough_routes`.

Every route that can carry a model's tool call is judged by its `Dialect` (`/v1/chat/completions`,
`/v1/completions`, `/v1/responses`, `/v1/messages`), one line each in `JUDGED`. Anything else under `/v1` is
forwarded untouched, so it is forwarded only when the operator says it cannot carry one: an unknown route (a
newer vLLM endpoint, a batch or file API, a stored-response lookup) is refused rather than becoming a way around
the allowlist. The proxy's own
endpoints (`/health`, `/metrics`, `/policies`, `/stats/*`, `/dashboard`) live outside `/v1` and are never
forwarded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from starlette.responses import Response

from proxy.dialects.base import Dialect, missing_pieces
from proxy.dialects.chat import ChatDialect
from proxy.dialects.completions import CompletionsDialect
from proxy.dialects.messages import MessagesDialect
from proxy.dialects.responses import ResponsesDialect
from proxy.errors import Forbidden, error_response
from proxy.logs import get_logger
from proxy.policy import LoadedPolicy
from proxy.policy.schema import DEFAULT_PASSTHROUGH_ROUTES

__all__ = [
    "DEFAULT_PASSTHROUGH_ROUTES", "JUDGED", "JUDGED_ROUTES", "ROUTE_NOT_ALLOWED", "judged_table", "passthrough_refusal",
    "route_listed",
]

ROUTE_NOT_ALLOWED = "route_not_allowed"


def judged_table(routes: Mapping[str, type[Dialect]]) -> dict[str, Dialect]:
    """The route table, each route checked whole: a route that lacks a piece (`missing_pieces`), or records a
    name another route records, is refused here, at import, naming what is missing."""
    table: dict[str, Dialect] = {}
    names: dict[str, str] = {}
    for path, kind in routes.items():
        missing = missing_pieces(kind)
        if missing:
            raise TypeError(f"the judged route {path} ({kind.__name__}) lacks: {', '.join(missing)}")
        if kind.route in names:
            raise TypeError(f"the judged routes {names[kind.route]} and {path} both record route {kind.route!r}")
        names[kind.route] = path
        table[path] = kind()
    return table


# The routes whose answers carry tool calls, each one `Dialect` (POST): the one table the app mounts and the
# refusals name. A new judged route is its module and one line here. Documented in docs/routes.md.
JUDGED = judged_table({
    "/v1/chat/completions": ChatDialect,
    "/v1/completions": CompletionsDialect,
    "/v1/responses": ResponsesDialect,
    "/v1/messages": MessagesDialect,
})
JUDGED_ROUTES = tuple(JUDGED)

log = get_logger("proxy.routes")


def route_listed(path: str, routes: Iterable[str]) -> bool:
    """A listed route matches itself and the paths below it, segment by segment (`/v1/models` matches
    `/v1/models/qwen`, not `/v1/models-x`)."""
    return any(path == route or path.startswith(route.rstrip("/") + "/") for route in routes)


def passthrough_refusal(method: str, path: str, policy: LoadedPolicy) -> Response | None:
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


class RouteNotAllowed(Forbidden, code=ROUTE_NOT_ALLOWED): ...


def _refusal(path: str, message: str, policy: LoadedPolicy) -> Response:
    log.warning("passthrough.refused", path=path, policy=policy.name)
    refused = RouteNotAllowed(message)
    for route_path, route in JUDGED.items():
        if route_listed(path, (route_path,)):
            return route.error_response(refused)  # a client of that API reads its error shape below its route too
    return error_response(refused)
