"""HTTP routes of the statistics: `/stats/models`, `/stats/compare`, `/stats/variants`,
`/stats/sessions/{id}`, `/stats/loops`, `/stats/overview` (the dashboard's).

Every route needs the admin token (`require_admin`). Errors leave in the one OpenAI error shape; the routes
answer it themselves (`ShapedErrorRoute`, not the app's exception handlers) so the router behaves the same
on whatever app includes it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from proxy.errors import BadRequest, ProxyError
from proxy.http.auth import ADMIN
from proxy.http.error_handlers import ShapedErrorRoute
from proxy.logs import get_logger
from proxy.stats.compare import compare_models, parse_pair
from proxy.stats.models import model_stats, parse_time, session_detail, top_loops
from proxy.stats.overview import blocked_turns, error_timeline, loop_groups, upstream_errors
from proxy.stats.session_feedback import add_feedback
from proxy.stats.variants import variant_stats

__all__ = ["router"]

log = get_logger("proxy.http.stats_routes")

T = TypeVar("T")

# Admin routes that answer errors in the one shape on any app (tests mount this router alone).
async def _rollups_settled(request: Request) -> None:
    # The writer adds a batch to the rollups in the transaction after its rows: wait for that step, so a
    # figure never reads rows that the rollups do not count yet.
    services = getattr(request.app.state, "proxy", None)
    writer = getattr(services, "writer", None)
    if writer is not None:
        with contextlib.suppress(TimeoutError):  # a store that cannot roll up now still answers, from what it has
            await writer.rollups_settled(5.0)
        if getattr(services, "shared_store", False):
            # Other processes write this store (`serve --workers N`, replicas): their committed batches whose rollup
            # step has not run yet are rolled up here (a marker is applied once, by whoever deletes it), so that
            # every process answers the same figures, those of one process.
            try:
                await writer.catch_up_rollups()
            except Exception as exc:  # the figures answer from what is rolled up
                log.warning("stats.catch_up_failed", error=str(exc)[:300])


router = APIRouter(route_class=ShapedErrorRoute, dependencies=[ADMIN, Depends(_rollups_settled)])


class _NotFound(ProxyError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "session_not_found"


def _time(value: str | None, name: str) -> float | None:
    try:
        return parse_time(value)
    except ValueError as exc:
        raise BadRequest(str(exc), param=name) from None


def _integer(value: str | None, name: str, low: int, high: int) -> int | None:
    # Parsed here rather than by FastAPI so that a bad value answers in the error shape, not FastAPI's 422.
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        raise BadRequest(f"{name} must be an integer from {low} to {high} (got {value!r})", param=name)
    return number


def _loop_min(request: Request, given: str | None) -> int:
    number = _integer(given, "loop_min_attempts", 2, 100)
    if number is not None:
        return number
    return int(request.app.state.proxy.policies.current().policy.loop_min_attempts)


async def _answer(request: Request, compute: Callable[[], Awaitable[Any]]) -> JSONResponse:
    return JSONResponse(await compute())  # errors: ShapedErrorRoute


async def _figures(request: Request, fn: Callable[..., Awaitable[T]], /, **kwargs: Any) -> T:
    """`await fn(engine, **kwargs)`: in the figures' own process where there is one (`FiguresProcess`)."""
    services = request.app.state.proxy
    figures = getattr(services, "figures", None)  # an app that mounts the router alone has none
    if figures is None:
        return await fn(services.engine, **kwargs)
    return await figures.compute(fn, services.engine, **kwargs)


@dataclass(slots=True)
class StatsParams:
    """The query parameters the stats routes share, as given. Each route parses the ones it uses inside
    `_answer`, so a bad value answers in the error shape; one it does not use is ignored like any unknown
    parameter."""

    since: str | None = None
    until: str | None = None
    policy: str | None = None
    model: str | None = None
    route: str | None = None
    loop_min_attempts: str | None = None

    def window(self) -> dict[str, float | None]:
        return {"since": _time(self.since, "since"), "until": _time(self.until, "until")}

    def loop_min(self, request: Request) -> int:
        return _loop_min(request, self.loop_min_attempts)


Params = Annotated[StatsParams, Depends()]


@router.get("/stats/models")
async def stats_models(request: Request, q: Params) -> JSONResponse:
    return await _answer(request, lambda: _figures(
        request, model_stats, **q.window(), policy=q.policy, model=q.model, route=q.route,
        loop_min_attempts=q.loop_min(request)))


def _pair(models: str | None) -> tuple[str, str]:

    try:
        return parse_pair(models or "")
    except ValueError as exc:
        raise BadRequest(str(exc), param="models") from None


@router.get("/stats/compare")
async def stats_compare(request: Request, q: Params, models: str | None = None) -> JSONResponse:
    return await _answer(request, lambda: _figures(
        request, compare_models, models=_pair(models), **q.window(), policy=q.policy, route=q.route))


@router.get("/stats/variants")
async def stats_variants(request: Request, q: Params) -> JSONResponse:
    return await _answer(request, lambda: _figures(
        request, variant_stats, **q.window(), model=q.model, policy=q.policy,
        loop_min_attempts=q.loop_min(request)))


@router.get("/stats/sessions/{session_id}")
async def stats_session(request: Request, session_id: str, loop_min_attempts: str | None = None) -> JSONResponse:
    async def compute() -> dict[str, Any]:
        detail = await _figures(request, session_detail, session_id=session_id,
                                loop_min_attempts=_loop_min(request, loop_min_attempts))
        if detail is None:
            raise _NotFound(f"no session {session_id!r} in the store", param="session_id")
        return add_feedback(detail, request.app.state.proxy.policies)

    return await _answer(request, compute)


@router.get("/stats/loops")
async def stats_loops(request: Request, q: Params, limit: str | None = None) -> JSONResponse:
    async def compute() -> dict[str, Any]:
        loops = await _figures(request, top_loops, limit=_integer(limit, "limit", 1, 1000) or 20,
                               **q.window(), model=q.model, loop_min_attempts=q.loop_min(request))
        return {"loops": loops}

    return await _answer(request, compute)


async def proxy_status(request: Request) -> dict[str, Any]:
    """The troubles an operator should see first: upstreams that do not answer, a refused policy or a held edit,
    the store."""
    state = request.app.state.proxy
    # The probe /health asks too: the banner above the figures and /health name the same upstreams.
    served, probed = await asyncio.gather(state.models.served({}), state.probe.check())
    upstreams = [{"url": upstream.base_url, "reachable": result.up, "error": result.error, "models": names}
                 for (upstream, names), result in zip(served, probed, strict=True)]
    policies = state.policies.status()
    writer = state.writer
    return {
        "upstreams": upstreams,
        "policy": policies["active"],
        "policy_errors": policies["errors"],
        "policy_held": policies["held"],  # widening edits not applied: what each widens, the command that applies it
        "store": {"queue": writer.depth, "failures": getattr(writer, "failures", 0),
                  "rows_rejected": getattr(writer, "rows_rejected", 0)},
        "compare": any(getattr(route, "path", None) == "/stats/compare" for route in request.app.routes),
    }


@router.get("/stats/overview")
async def stats_overview(request: Request, range_name: str = Query("24h", alias="range"),
                         loop_min_attempts: str | None = None) -> JSONResponse:
    async def compute() -> dict[str, Any]:
        return {
            "timeline": await _figures(request, error_timeline, range_name=range_name),
            "loop_groups": await _figures(request, loop_groups, min_attempts=_loop_min(request, loop_min_attempts)),
            "blocked": await _figures(request, blocked_turns),
            "upstream_errors": await _figures(request, upstream_errors),
            "status": await proxy_status(request),
        }

    return await _answer(request, compute)
