"""Everything a request handler needs, built once at start-up."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.config import Settings
from proxy.metrics import IN_FLIGHT
from proxy.models import ModelCatalog
from proxy.policy import PolicyManager
from proxy.sessions import SessionResolver
from proxy.store.writer import StoreWriter
from proxy.upstream import Upstream

__all__ = ["ProxyState"]


@dataclass
class ProxyState:
    settings: Settings
    upstream: Upstream
    engine: AsyncEngine
    writer: StoreWriter
    models: ModelCatalog
    sessions: SessionResolver
    policies: PolicyManager
    in_flight: Counter[str] = field(default_factory=Counter)

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
