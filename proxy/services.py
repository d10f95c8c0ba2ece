"""Everything a request handler needs, built once at start-up."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.config import Settings
from proxy.enforce.record import RequestRecord
from proxy.policy import PolicyManager
from proxy.sessions.resolve import SessionResolver
from proxy.stats.prometheus import IN_FLIGHT
from proxy.store.writer import StoreWriter
from proxy.upstream.client import Upstreams
from proxy.upstream.model_catalog import ModelCatalog
from proxy.upstream.vllm_version import UpstreamVllm

__all__ = ["ProxyState"]


@dataclass
class ProxyState:
    settings: Settings
    upstream: Upstreams
    engine: AsyncEngine
    writer: StoreWriter
    models: ModelCatalog
    sessions: SessionResolver
    policies: PolicyManager
    in_flight: Counter[str] = field(default_factory=Counter)
    # Called with every finished request (throughput windows, for one); must not block.
    listeners: list[Callable[[RequestRecord], None]] = field(default_factory=list)
    # The upstream's vLLM version family: how raw XML in content is read (None: the default rules).
    vllm: UpstreamVllm | None = None

    def enter(self, model: str) -> int:
        """Counts the request in; returns the concurrency it started at (itself included)."""
        self.in_flight[model] += 1
        IN_FLIGHT.labels(model).inc()
        return self.in_flight[model]

    def leave(self, model: str) -> None:
        self.in_flight[model] -= 1
        IN_FLIGHT.labels(model).dec()
        if self.in_flight[model] <= 0:
            del self.in_flight[model]

    def finish(self, record: RequestRecord) -> None:
        """The one place a request ends: counted out, queued for the store, told to listeners."""
        if record.saved:
            return
        self.leave(record.model)
        record.save(self.writer)
        for listener in self.listeners:
            listener(record)
