"""Everything a request handler needs: built and started in one place (`Services.start`), closed in one
place (`Services.close`, in the reverse order), and the one place a request ends (`Services.finish`)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from proxy import telemetry
from proxy.config import ConfigError, Settings
from proxy.errors import Forbidden, StoreUnavailable
from proxy.keys import KeyRing, ProjectKey
from proxy.logs import get_logger
from proxy.policy import LoadedPolicy, PolicyManager, default_policy_path
from proxy.policy.file.shared import FollowerPolicies
from proxy.record import RequestRecord
from proxy.sessions.resolve import SessionResolver
from proxy.sessions.response_chains import ResponseChains
from proxy.stats.figures_process import FiguresProcess
from proxy.stats.figures_relay import FiguresClient
from proxy.stats.prometheus import observe_request
from proxy.stats.traces import TracesUnavailable, start_traces
from proxy.stats.webhook import Webhook
from proxy.store.db import create_engine, prepare_schema
from proxy.store.dialect import backend_of
from proxy.store.journal import OwnerLock, recover
from proxy.store.recorder import queue_request
from proxy.store.retention import Retention
from proxy.store.writer import StoreWriter
from proxy.throughput.in_flight import InFlightBoard
from proxy.throughput.live import LiveWindows
from proxy.upstream.client import Upstreams, without_credentials
from proxy.upstream.model_catalog import ModelCatalog
from proxy.upstream.probe import UpstreamProbe
from proxy.upstream.vllm_version import UpstreamVllm

__all__ = ["Services", "WorkerRole"]

log = get_logger("proxy.services")


@dataclass(frozen=True, kw_only=True)
class WorkerRole:
    """A process's place among `serve --workers N` (proxy/http/supervisor.py): the parent decides the policy and
    computes the figures for all of them; a worker follows its policy state and asks it for figures."""

    index: int  # 0 .. count - 1; worker 0 also runs what one process does for all (retention, the webhook)
    count: int
    leader: int  # the parent's pid: SIGHUP to any worker is sent on to it
    policy_state: str  # the file the parent publishes the served policies in (proxy/policy/file/shared.py)
    figures_socket: str | None = None  # where the parent computes figures (proxy/stats/figures_relay.py)
    running: Any = None  # a shared integer: the workers up now, kept by the parent (`/health`)
    in_flight: Any = None  # the shared array of `InFlightBoard`: requests in flight per model in all workers

    @property
    def runs_singletons(self) -> bool:
        return self.index == 0

    def running_now(self) -> int:
        value = getattr(self.running, "value", None)
        return int(value) if isinstance(value, int) else self.count


@dataclass(kw_only=True)
class Services:
    settings: Settings
    upstream: Upstreams
    engine: AsyncEngine
    writer: StoreWriter
    models: ModelCatalog
    sessions: SessionResolver
    policies: PolicyManager
    # The upstream's vLLM version family: how raw XML in content is read.
    vllm: UpstreamVllm
    # Whether each upstream answers, asked every `upstream_probe_seconds` (/health, the banner, the dashboard).
    probe: UpstreamProbe
    # The project keys requests present (proxy/keys/ring.py); None only where a test builds Services by hand.
    keys: KeyRing | None = None
    in_flight: Counter[str] = field(default_factory=Counter)
    # Called with every finished request (throughput windows, metrics); must not block.
    listeners: list[Callable[[RequestRecord], None]] = field(default_factory=list)
    live: LiveWindows | None = None
    # Where the stats routes' figures are computed, when not in this process (`settings.stats.figures_process`).
    figures: FiguresProcess | FiguresClient | None = None
    # The OpenTelemetry exporter while tracing is on (proxy/stats/traces.py), else None.
    traces: Any = None
    # The Responses ids handed out that the upstream must read as another (a retried stream's, a blocked turn's).
    response_chains: ResponseChains = field(default_factory=ResponseChains)
    # This process's place among `serve --workers N`; None for a proxy of one process.
    role: WorkerRole | None = None
    board: InFlightBoard | None = None  # the requests in flight of all the workers
    # Other processes write this store too (`serve --workers N`, or a server database replicas may share).
    shared_store: bool = False
    # What `close` undoes, newest first.
    _closers: AsyncExitStack = field(default_factory=AsyncExitStack, repr=False)

    # -- start and close --------------------------------------------------------------------------------

    @classmethod
    async def start(cls, settings: Settings, *, own_process: bool = False, role: WorkerRole | None = None) -> Services:
        """Builds and starts every service; a failure part way closes what had started, then raises.
        `own_process`: the process is this proxy's alone (`serve`), where the figures get a worker process unless
        the settings say otherwise. `role`: the process is one of `serve --workers N` (its policies, figures and
        once-for-all tasks are the parent's or worker 0's)."""
        closers = AsyncExitStack()
        try:
            return await cls._start(settings, closers, own_process, role)
        except BaseException:
            await closers.aclose()
            raise

    @classmethod
    async def _start(cls, settings: Settings, closers: AsyncExitStack, own_process: bool,
                     role: WorkerRole | None) -> Services:
        policy_path = settings.policy.file or default_policy_path()
        policies = (PolicyManager(policy_path) if role is None
                    else FollowerPolicies(policy_path, role.policy_state, leader=role.leader))
        engine = create_engine(settings.store.url)
        closers.push_async_callback(engine.dispose)
        await prepare_schema(engine, migrate_on_start=settings.store.migrate_on_start)
        writer = StoreWriter(engine, batch_size=settings.store.batch_size,
                             flush_seconds=settings.store.flush_seconds, max_queue=settings.store.max_queue)
        owner_lock = OwnerLock(engine, writer.owner)
        await owner_lock.acquire()
        closers.push_async_callback(owner_lock.release)
        # The requests of calls released by a proxy that died are on record before anything new is.
        try:
            await recover(engine, writer.owner)
        except Exception as exc:  # a store that cannot be written: the writer's probe reports it in /health
            log.error("store.journal_recovery_failed", error=str(exc))
        await writer.start()
        closers.push_async_callback(_stopped, writer)
        upstream = Upstreams(settings)
        closers.push_async_callback(upstream.aclose)
        # Another process reads what this one writes (workers, or replicas on a server database): what a client's
        # next request is continued from is committed before the answer's last bytes leave (`SessionResolver`).
        shared = role is not None or backend_of(engine).concurrent_writers
        services = cls(
            settings=settings, upstream=upstream, engine=engine, writer=writer, policies=policies,
            models=ModelCatalog(upstream, ttl=settings.upstream.models_cache_seconds,
                                aliases=settings.upstream.model_aliases),
            sessions=SessionResolver(settings.policy.session_header, engine=engine, writer=writer, shared=shared),
            vllm=UpstreamVllm(vllm_version=settings.upstream.vllm_version, tool_parser=settings.upstream.tool_parser,
                              upstream=upstream),
            probe=UpstreamProbe(upstream.all, interval_seconds=settings.upstream.probe_seconds),
            response_chains=ResponseChains(engine=engine, writer=writer, shared=shared),
            role=role,
            shared_store=shared,
            board=(InFlightBoard(role.in_flight, role.count, role.index)
                   if role is not None and role.in_flight is not None else None),
            _closers=closers,
        )
        await services.probe.start()
        closers.push_async_callback(services.probe.stop)
        await services.vllm.detect()
        keys = services.keys = KeyRing(engine, require=settings.http.require_keys,
                                       cache_seconds=settings.http.key_cache_seconds)
        await keys.start()
        closers.push_async_callback(keys.stop)
        live = services.live = LiveWindows(engine, services.in_flight,
                                           window_seconds=settings.stats.throughput_window_seconds, writer=writer)
        services.listeners += [live.observe, observe_request]
        await policies.start()
        closers.push_async_callback(policies.stop)
        await live.start()
        closers.push_async_callback(live.stop)
        once = role is None or role.runs_singletons  # what one process does for all the workers
        if settings.store.retention_days is not None and once:
            retention = Retention(engine, settings.store.retention_days)
            await retention.start()
            closers.push_async_callback(retention.stop)
        if role is not None and role.figures_socket is not None:
            services.figures = FiguresClient(role.figures_socket)
        elif (settings.stats.figures_process or (settings.stats.figures_process is None and own_process)) and \
                FiguresProcess.can_share(engine):
            figures = services.figures = FiguresProcess(settings.store.url)
            closers.push_async_callback(figures.close)
        try:
            traces = services.traces = start_traces(settings.telemetry.otel_endpoint)  # None unless an endpoint is set
        except TracesUnavailable as exc:
            raise ConfigError("otel_endpoint", str(exc)) from None
        if traces is not None:
            traces.start()
            services.listeners.append(traces.finish)
            closers.push_async_callback(asyncio.to_thread, traces.close)
        if settings.stats.alert_webhook_url and once:
            webhook = Webhook(settings.stats.alert_webhook_url,
                              interval_seconds=settings.stats.alert_webhook_interval_seconds,
                              held=policies.held)
            await webhook.start()
            closers.push_async_callback(webhook.stop)
        return services

    async def close(self) -> None:
        """Stops and closes every service, in the reverse order of `start`."""
        await self._closers.aclose()

    # -- one request ----------------------------------------------------------------------------------

    async def bind(self, headers: Mapping[str, str]) -> ProjectKey | None:
        """The project key a request presents, checked (`KeyRing.bind`: 401 for a bad one, or for none where
        `require_keys`); None for a request without one."""
        return await self.keys.bind(headers) if self.keys is not None else None

    def upstream_headers(self, headers: Mapping[str, str], key: ProjectKey | None) -> dict[str, str]:
        """The headers a request goes upstream with: a keyed request's credentials are the proxy's, never sent on
        (the upstream gets its configured key, if any)."""
        return self.upstream.headers(without_credentials(headers) if key is not None else headers)

    def policy_for(self, headers: Mapping[str, str], key: ProjectKey | None = None) -> LoadedPolicy:
        """The request's policy: its project key's where the key names one (over any header), else
        `PolicyManager.pick`. In enforce mode with `on_store_failure: refuse`, while the store cannot record, no
        request starts (the GPU would answer for nothing the client may receive)."""
        if key is not None and key.policy is not None:
            policy = self.policies.get(key.policy)
            if policy is None:  # never another policy in its place: the key was made to be judged by this one
                raise Forbidden(f"the project key's policy {key.policy!r} is not loaded by this proxy: serve its "
                                "file from the policies directory, or make the key again with another --policy")
        else:
            policy = self.policies.pick(headers.get("x-allowlist-policy"), by_header=self.settings.policy.header)
        if policy.policy.mode == "enforce" and self.settings.store.on_failure == "refuse" and \
                (reason := self.writer.health()) is not None:
            raise StoreUnavailable(f"the proxy cannot record calls now, so it serves none: {reason}")
        return policy

    def enter(self, model: str) -> int:
        """Counts the request in; returns the concurrency it started at (itself included): of all the workers, where
        this process is one of `serve --workers N`."""
        self.in_flight[model] += 1
        telemetry.emit(telemetry.InFlight(model, 1))
        if self.board is not None:
            return self.board.add(model, 1)
        return self.in_flight[model]

    def _leave(self, model: str) -> None:
        if self.board is not None:
            self.board.add(model, -1)
        self.in_flight[model] -= 1
        telemetry.emit(telemetry.InFlight(model, -1))
        if self.in_flight[model] <= 0:
            del self.in_flight[model]

    def finish(self, record: RequestRecord) -> None:
        """The one place a request ends, whatever its route: counted out, its outcome settled and queued for
        the store, the metrics and the other listeners fed, the `request` log line written. A second call
        for the same record does nothing."""
        if record.saved:
            return
        self._leave(record.model)
        queue_request(self.writer, record)
        for listener in self.listeners:
            listener(record)
        # A blocked turn or an upstream failure is what an operator filtering on `warning` wants to see.
        emit = log.warning if record.outcome in _WARN_OUTCOMES else log.info
        emit("request", request_id=record.id, session=record.session.id, model=record.model,
                 route=record.route, stream=record.stream, status=record.status, outcome=record.outcome,
                 error=record.error, blocked=record.blocked, attempts=record.attempts,
                 ttfb_ms=_round(record.ttfb_ms), ttft_ms=_round(record.ttft_ms),
                 duration_ms=_round(record.duration_ms), concurrency=record.concurrency)


_WARN_OUTCOMES = frozenset({"blocked", "upstream_error"})


async def _stopped(writer: StoreWriter) -> None:
    await writer.stop()
    log.info("proxy.stopped", rows_written=writer.rows_written)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
