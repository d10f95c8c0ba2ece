"""The FastAPI application: the routes, and a lifespan that starts and closes the services."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from proxy.banner import render, startup_report
from proxy.config import Settings
from proxy.dialects.passthrough import forward, list_models
from proxy.dialects.routes import JUDGED, passthrough_refusal
from proxy.http.auth import ADMIN
from proxy.http.dashboard import router as dashboard_router
from proxy.http.error_handlers import install_error_handlers
from proxy.http.host_origin import HostOriginGuard
from proxy.http.stats_routes import router as stats_router
from proxy.logs import configure_logging, get_logger, on_terminal
from proxy.logs import hold as hold_logs
from proxy.logs import release as release_logs
from proxy.policy.file.manager import held_summary
from proxy.services import Services
from proxy.stats.prometheus import scrape_registry

__all__ = ["create_app"]

log = get_logger("proxy.http.app")
# How long a worker thread may hold the GIL while the event loop waits for it (see `lifespan`).
_SWITCH_SECONDS = 0.001


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    configure_logging(settings.telemetry.log_level, settings.telemetry.log_format)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own_process = getattr(app.state, "own_process", False)  # `serve`: the process is this proxy's alone
        if own_process:
            # Figures and large bodies are computed in worker threads; a thread holding the GIL keeps the event
            # loop (every relayed stream) waiting up to the switch interval, 5 ms by default, at each turn.
            sys.setswitchinterval(min(sys.getswitchinterval(), _SWITCH_SECONDS))
        banner = getattr(app.state, "print_banner", False)
        if banner:
            hold_logs()  # what starting finds is said under the banner, not above it
        try:
            services = await Services.start(settings, own_process=own_process,
                                             role=getattr(app.state, "role", None))
        except BaseException:
            release_logs()
            raise
        try:
            app.state.proxy = services
            app.state.live = services.live
            app.state.loop = asyncio.get_running_loop()  # lets tests and the CLI reach the writer
            host, port = getattr(app.state, "listen", (settings.http.host, settings.http.port))
            report = await startup_report(services, host=host, port=port)
            if banner:
                print(render(report), file=sys.stderr, flush=True)
                release_logs()
            # On a terminal the banner said it all; a log read by machines gets the record.
            said = banner and settings.telemetry.log_format == "auto" and on_terminal()
            (log.debug if said else log.info)("proxy.started", xml_rules=services.vllm.rules.label, **report)
            if own_process:
                # What start-up built (modules, the policy, the tool catalogues) lives as long as the process: out
                # of the collector's reach, a full collection walks only what serving made since, not tens of
                # megabytes of start-up objects while every stream waits.
                gc.collect()
                gc.freeze()
            yield
        finally:
            release_logs()  # a start that failed before the banner still says why
            await services.close()

    app = FastAPI(title="allowlist-proxy", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(app)
    app.add_middleware(HostOriginGuard, settings=settings)
    for path, dialect in JUDGED.items():
        app.add_api_route(path, _judged(dialect.handle), methods=["POST"])
    app.include_router(router)
    app.include_router(dashboard_router)
    app.include_router(stats_router)
    return app


def _judged(handle: Callable[[Request, Services], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        return await handle(request, services_of(request))

    return route


def services_of(request: Request) -> Services:
    return request.app.state.proxy


router = APIRouter()


@router.get("/v1/models")
async def _models(request: Request) -> Response:
    services = services_of(request)
    key = await services.bind(request.headers)
    if refused := passthrough_refusal("GET", "/v1/models", services.policy_for(request.headers, key)):
        return refused
    return await list_models(request, services, services.upstream_headers(request.headers, key))


@router.api_route("/v1/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
async def _forward(request: Request, path: str) -> Response:
    # Only what the policy's passthrough_routes lists; the routes that carry tool calls are judged above.
    services = services_of(request)
    key = await services.bind(request.headers)
    if refused := passthrough_refusal(request.method, "/v1/" + path, services.policy_for(request.headers, key)):
        return refused
    return await forward(request, services, "/" + path, services.upstream_headers(request.headers, key))


@router.get("/health")
async def _health(request: Request) -> JSONResponse:
    # 503 where a load balancer should send elsewhere: this replica's store cannot record while enforce
    # mode refuses unrecorded answers. 200 "degraded" where sending elsewhere would not help or the proxy
    # still serves: an unreachable upstream (shared by the replicas; requests get 502 meanwhile), a refused
    # policy reload or a held widening edit (the last good policy keeps serving; the operator has to act).
    services = services_of(request)
    reasons: dict[str, str] = {}
    if (store := await services.writer.check()) is not None:
        reasons["store"] = store
    probed = await services.probe.check()
    if down := [result for result in probed if not result.up]:
        reasons["upstream"] = "; ".join(f"{result.url} is not reachable ({result.error})" for result in down)
    if errors := services.policies.status()["errors"]:
        first = errors[0]
        reasons["policy"] = f"{first['file']}:{first['line']}: {first['message']} (the last good policy serves)"
    if held := services.policies.held():
        reasons["policy_held"] = "; ".join(held_summary(entry) for entry in held)
    stop_sending = "store" in reasons and services.settings.store.on_failure == "refuse"
    body = {"status": "degraded" if reasons else "ok", "reasons": reasons, "upstream": probed[0].url,
            "upstream_reachable": not down, "upstreams": [result.describe() for result in probed],
            "policy": services.policies.current().name,
            "store_queue": services.writer.depth, "store_rows_lost": services.writer.rows_lost,
            "vllm": services.vllm.describe(), **_workers(services)}
    return JSONResponse(body, status_code=503 if stop_sending else 200)


def _workers(services: Services) -> dict[str, int]:
    """How many processes serve this port now (`serve --workers N`), and which one answers."""
    role = services.role
    if role is None:
        return {"workers": 1}
    return {"workers": role.running_now(), "worker": role.index}


@router.get("/policies", dependencies=[ADMIN])
async def _policies(request: Request) -> dict[str, object]:
    return services_of(request).policies.status()


@router.get("/metrics", dependencies=[ADMIN])
async def _metrics() -> Response:
    return Response(generate_latest(scrape_registry()), media_type=CONTENT_TYPE_LATEST)
