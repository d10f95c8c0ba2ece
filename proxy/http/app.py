"""The FastAPI application: start-up, shutdown and routes, nothing else."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import ClientDisconnect

from proxy.banner import render, startup_report
from proxy.config import Settings
from proxy.dialects.chat import chat_completions
from proxy.dialects.completions import completions
from proxy.dialects.messages import create_message
from proxy.dialects.passthrough import forward, list_models
from proxy.dialects.responses import create_response
from proxy.dialects.routes import passthrough_refusal
from proxy.enforce.exchange import pick_policy
from proxy.errors import ProxyError, Unauthorized, error_body, error_response
from proxy.http.dashboard import router as dashboard_router
from proxy.http.stats_routes import router as stats_router
from proxy.logs import configure_logging, get_logger
from proxy.policy import PolicyManager, default_policy_path
from proxy.services import ProxyState
from proxy.sessions.resolve import SessionResolver
from proxy.stats.overview import router as overview_router
from proxy.stats.prometheus import REGISTRY
from proxy.stats.prometheus_feed import observe_request
from proxy.store.db import create_engine, migrate
from proxy.store.journal import OwnerLock, recover
from proxy.store.writer import StoreWriter
from proxy.throughput.live import LiveWindows
from proxy.upstream.client import Upstreams
from proxy.upstream.model_catalog import ModelCatalog
from proxy.upstream.vllm_version import UpstreamVllm

__all__ = ["create_app"]

log = get_logger("proxy.http.app")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    configure_logging(settings.log_level, settings.log_format)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        policies = PolicyManager(settings.policy or default_policy_path(),
                                 allow_header_selection=settings.policy_header)
        engine = create_engine(settings.db)
        await migrate(engine)
        writer = StoreWriter(engine, batch_size=settings.store_batch_size,
                             flush_seconds=settings.store_flush_seconds, max_queue=settings.store_max_queue)
        owner_lock = OwnerLock(engine, writer.owner)
        await owner_lock.acquire()
        # The requests of calls released by a proxy that died are on record before anything new is.
        try:
            await recover(engine, writer.owner)
        except Exception as exc:  # a store that cannot be written: the writer's probe reports it in /health
            log.error("store.journal_recovery_failed", error=str(exc))
        await writer.start()
        upstream = Upstreams(settings)
        state = ProxyState(
            settings=settings, upstream=upstream, engine=engine, writer=writer,
            models=ModelCatalog(upstream, ttl=settings.models_cache_seconds, aliases=settings.model_aliases),
            sessions=SessionResolver(settings.session_header, engine=engine, writer=writer), policies=policies,
            vllm=UpstreamVllm(vllm_version=settings.vllm_version, tool_parser=settings.tool_parser,
                              upstream=upstream),
        )
        assert state.vllm is not None  # built just above
        await state.vllm.detect()
        live = LiveWindows(engine, state.in_flight,
                           window_seconds=settings.throughput_window_seconds)
        state.listeners += [live.observe, observe_request]
        app.state.proxy = state
        app.state.live = live
        app.state.loop = asyncio.get_running_loop()  # lets tests and the CLI reach the writer
        await policies.start()
        await live.start()
        host, port = getattr(app.state, "listen", (settings.host, settings.port))
        report = await startup_report(state, host=host, port=port)
        app.state.banner = report
        if getattr(app.state, "print_banner", False):
            print(render(report), file=sys.stderr, flush=True)
        log.info("proxy.started", xml_rules=state.vllm.rules.label, **report)
        try:
            yield
        finally:
            await policies.stop()
            await upstream.aclose()
            await live.stop()
            await writer.stop()
            await owner_lock.release()
            await engine.dispose()
            log.info("proxy.stopped", rows_written=writer.rows_written)

    app = FastAPI(title="allowlist-proxy", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(dashboard_router)
    app.include_router(stats_router)
    app.include_router(overview_router)

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

    def state_of(request: Request) -> ProxyState:
        return request.app.state.proxy

    def require_admin(request: Request) -> None:
        token = settings.admin_token
        if token and request.headers.get("authorization") != f"Bearer {token}":
            raise Unauthorized("this endpoint needs the admin token: Authorization: Bearer <admin_token>")

    @app.post("/v1/chat/completions")
    async def _chat(request: Request) -> Response:
        return await chat_completions(request, state_of(request))

    @app.post("/v1/completions")
    async def _completions(request: Request) -> Response:
        return await completions(request, state_of(request))

    @app.post("/v1/responses")
    async def _responses(request: Request) -> Response:
        return await create_response(request, state_of(request))

    @app.post("/v1/messages")
    async def _messages(request: Request) -> Response:
        return await create_message(request, state_of(request))

    @app.get("/v1/models")
    async def _models(request: Request) -> Response:
        state = state_of(request)
        if refused := passthrough_refusal("GET", "/v1/models", pick_policy(request, state)):
            return refused
        return await list_models(request, state)

    @app.api_route("/v1/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def _forward(request: Request, path: str) -> Response:
        # Only what the policy's passthrough_routes lists; the routes that carry tool calls are judged above.
        state = state_of(request)
        if refused := passthrough_refusal(request.method, "/v1/" + path, pick_policy(request, state)):
            return refused
        return await forward(request, state, "/" + path)

    @app.get("/health")
    async def _health(request: Request) -> JSONResponse:
        # 503 where a load balancer should send elsewhere: this replica's store cannot record while enforce
        # mode refuses unrecorded answers. 200 "degraded" where sending elsewhere would not help or the proxy
        # still serves: an unreachable upstream (shared by the replicas; requests get 502 meanwhile), a refused
        # policy reload (the last good policy keeps serving).
        state = state_of(request)
        reasons: dict[str, str] = {}
        if (store := await state.writer.check()) is not None:
            reasons["store"] = store
        reachable = await state.upstream.reachable()
        if not reachable:
            reasons["upstream"] = f"{state.upstream.base_url} is not reachable"
        if errors := state.policies.status()["errors"]:
            first = errors[0]
            reasons["policy"] = f"{first['file']}:{first['line']}: {first['message']} (the last good policy serves)"
        stop_sending = "store" in reasons and settings.on_store_failure == "refuse"
        body = {"status": "degraded" if reasons else "ok", "reasons": reasons, "upstream": state.upstream.base_url,
                "upstream_reachable": reachable, "policy": state.policies.current().name,
                "store_queue": state.writer.depth, "store_rows_lost": state.writer.rows_lost,
                "vllm": state.vllm.describe() if state.vllm else None}
        return JSONResponse(body, status_code=503 if stop_sending else 200)

    @app.get("/policies")
    async def _policies(request: Request) -> dict[str, object]:
        require_admin(request)
        return state_of(request).policies.status()

    @app.get("/metrics")
    async def _metrics(request: Request) -> Response:
        require_admin(request)
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    return app
