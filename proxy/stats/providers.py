"""The per-model figures of `/stats/models`, declared once: each field of `ModelFigures` names a figure and the
provider that computes it.

A provider is an async function `(conn, filters)` (or `(conn, filters, loop_min_attempts)`) returning
{model: value}. Most come from `proxy.store.figures`, which sums the hourly rollups and reads only the
window's edges from the rows; a figure without a rollup names its query in `proxy.store.queries` (plain SQL
over the rows) instead. A model the provider does not mention gets the field's empty value.

Adding a figure: its SQL in `proxy.store.queries` (and, when the rows get too many, a rollup in
`proxy.store.figures`), a field here, and its key in `proxy.stats.models.model_entry` (with a dashboard
column in `MODEL_COLUMNS` beside it, if the page should show it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.store import figures, queries
from proxy.store.queries import (
    CallCounts,
    FailedTurns,
    Filters,
    LoopSummary,
    RequestCounts,
    SessionErrors,
    SessionRecovery,
)

__all__ = ["PROVIDERS", "ModelFigures", "Provider", "gather"]

Compute = Callable[..., Awaitable[Mapping[str, Any]]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Provider:
    """How one figure is computed over a window; a model it has nothing on gets the field's default."""

    compute: Compute
    # Whether `compute` also takes the policy's loop_min_attempts.
    loop_min: bool = False
    # Whether a model it reports is listed even when no other figure has it (calls and requests do).
    lists_models: bool = False


def _by(compute: Compute, *, loop_min: bool = False, lists_models: bool = False) -> dict[str, Provider]:
    return {"provider": Provider(compute=compute, loop_min=loop_min, lists_models=lists_models)}


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelFigures:
    """One model's figures over a window, each computed by the provider its field declares."""

    calls: CallCounts = field(default_factory=CallCounts, metadata=_by(figures.call_counts, lists_models=True))
    requests: RequestCounts = field(default_factory=RequestCounts,
                                    metadata=_by(figures.request_counts, lists_models=True))
    reasons: dict[str, int] = field(default_factory=dict, metadata=_by(figures.reason_counts))
    primary_reasons: dict[str, int] = field(default_factory=dict, metadata=_by(figures.primary_reason_counts))
    loops: LoopSummary = field(default_factory=LoopSummary, metadata=_by(figures.sequence_stats, loop_min=True))
    # upstream attempts -> requests
    attempts: dict[int, int] = field(default_factory=dict, metadata=_by(figures.attempt_histograms))
    # one entry per concurrency level
    throughput: list[dict[str, Any]] = field(default_factory=list, metadata=_by(figures.throughput_by_concurrency))
    session_errors: list[SessionErrors] = field(default_factory=list, metadata=_by(figures.session_error_counts))
    session_recoveries: list[SessionRecovery] = field(default_factory=list,
                                                      metadata=_by(figures.session_recoveries))
    ungoverned_text: int = field(default=0, metadata=_by(queries.ungoverned_text_counts))
    # requests whose retry budget ran out (outcome `blocked`), and those the upstream failed (`upstream_error`)
    failed: FailedTurns = field(default_factory=FailedTurns, metadata=_by(queries.failed_turn_counts))
    # detection rule -> secrets replaced before the model saw them (proxy/enforce/secrets.py)
    secrets_redacted: dict[str, int] = field(default_factory=dict, metadata=_by(queries.secret_redaction_counts))


# figure name -> its provider, in the order they run.
PROVIDERS: dict[str, Provider] = {f.name: f.metadata["provider"] for f in fields(ModelFigures)}


async def gather(conn: AsyncConnection, f: Filters, *, loop_min_attempts: int) -> dict[str, ModelFigures]:
    """model -> its figures over the window, for every model with tool calls or requests in it, sorted by name."""
    found: dict[str, Mapping[str, Any]] = {}
    for name, provider in PROVIDERS.items():
        extra = (loop_min_attempts,) if provider.loop_min else ()
        found[name] = await provider.compute(conn, f, *extra)
    listed = sorted({model for name, provider in PROVIDERS.items() if provider.lists_models for model in found[name]})
    return {model: ModelFigures(**{name: by_model[model] for name, by_model in found.items() if model in by_model})
            for model in listed}
