"""What happens inside the proxy, as plain records, for whoever listens: today the Prometheus metrics
(proxy/stats/prometheus.py). A part of the proxy emits an event and knows no listener; a listener subscribes
once and reads every event. So the metrics sit above the layers they count (docs/DESIGN.md, "Layers"), and
nothing below them imports them.

Listeners run in the emitter's thread, at once: they must not block (a counter, a gauge, a dictionary). An event
is a class made `@event` (a frozen dataclass): its name says what happened, its fields what a listener reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

__all__ = [
    "AttemptRetried", "BudgetSpent", "CallJudged", "ConnectionLimited", "InFlight", "ModelNotFound", "ModelsServed",
    "PassthroughAnswered", "PolicyFileHeld", "PolicyFileLoaded", "PolicyFileRefused", "ReleaseWaited",
    "ReleasedUnrecorded", "SecretsRedacted", "StoreHealth", "StoreQueue", "StoreRefused", "StoreRowLost",
    "StoreRowRepaired", "StoreWriteFailed", "UngovernedRequest", "UngovernedText", "UpstreamAttempt", "UpstreamProbed",
    "emit", "event", "subscribe", "unsubscribe",
]

Listener = Callable[[object], None]
_Event = TypeVar("_Event")


@dataclass_transform(frozen_default=True)
def event(cls: type[_Event]) -> type[_Event]:
    """An event: a frozen dataclass with slots, its fields what a listener reads."""
    return dataclass(frozen=True, slots=True)(cls)


_listeners: list[Listener] = []


def subscribe(listener: Listener) -> None:
    """Every event from now on is given to `listener` too (once, however often it subscribes)."""
    if listener not in _listeners:
        _listeners.append(listener)


def unsubscribe(listener: Listener) -> None:
    """`listener` gets no more events (a listener that was never subscribed is no error)."""
    if listener in _listeners:
        _listeners.remove(listener)


def emit(event: object) -> None:
    for listener in _listeners:
        listener(event)



# -- requests and their calls -------------------------------------------------------------------------------


@event
class CallJudged:
    """One judged call of a request, in its session's order."""

    model: str
    session: str
    decision: str
    reason: str  # the primary reason, "" for none
    is_error: bool  # `Verdict.is_error`
    loop_key: str | None  # `Verdict.loop_key`
    loop_min_attempts: int  # the policy's: a run this long is a loop


@event
class AttemptRetried:
    """The upstream is asked again after a rejection."""

    model: str


@event
class BudgetSpent:
    """A request's retry budget ran out."""

    model: str


@event
class UngovernedText:
    """A turn of a recognised text-acting client holds actions the proxy could not read or judge."""

    model: str
    client: str


@event
class SecretsRedacted:
    """Secrets of one type replaced in a request before it went upstream (never the secrets themselves)."""

    model: str
    type: str  # the detection rule's id
    count: int


@event
class UngovernedRequest:
    """A request offers tools none of which a tool profile (or the shell heuristic) governs."""

    model: str


@event
class InFlight:
    """A judged request started (`change` 1) or ended (-1)."""

    model: str
    change: int


@event
class PassthroughAnswered:
    """A forwarded (not judged) request was answered."""

    route: str
    status: int


@event
class ConnectionLimited:
    """A client connection was closed or refused by a limit (header_timeout, body_timeout, idle, too_many)."""

    limit: str


# -- the upstream -------------------------------------------------------------------------------------------


@event
class UpstreamAttempt:
    """One upstream attempt ended: ok, http_error (a non-200 answer) or error."""

    model: str
    upstream: str
    outcome: str
    seconds: float


@event
class UpstreamProbed:
    """An upstream answered its /v1/models probe (`up`), or did not."""

    upstream: str
    up: bool


@event
class ModelsServed:
    """Model names an upstream serves (listed in its config or its /v1/models)."""

    names: tuple[str, ...]


@event
class ModelNotFound:
    """A request named a model no upstream serves."""

    model: str


# -- the policy ---------------------------------------------------------------------------------------------


@event
class PolicyFileLoaded:
    """The file on disk is the policy being served."""

    file: str


@event
class PolicyFileHeld:
    """A policy file holds an edit that widens the policy, not applied until SIGHUP (`held`), or no longer does."""

    file: str
    held: bool


@event
class PolicyFileRefused:
    """A policy file was refused at load or reload (the last good one is served)."""

    file: str


# -- the store ----------------------------------------------------------------------------------------------


@event
class StoreQueue:
    """Rows waiting for the store writer."""

    depth: int


@event
class StoreHealth:
    """The store can record (`up`), or fails."""

    up: bool


@event
class StoreWriteFailed:
    """A batch write failed (it is retried)."""


@event
class StoreRowRepaired:
    """The database refused a row as it came and took it with its text made safe."""


@event
class StoreRowLost:
    """A row the store never got: queue full, store down at shutdown, row refused."""

    table: str


@event
class ReleaseWaited:
    """How long judged calls waited for their rows to be committed before release (enforce mode)."""

    seconds: float


@event
class ReleasedUnrecorded:
    """Calls released before the store committed them (`on_store_failure: continue`)."""

    model: str
    calls: int


@event
class StoreRefused:
    """A request refused with 503 because the store could not record (`on_store_failure: refuse`)."""

    model: str
