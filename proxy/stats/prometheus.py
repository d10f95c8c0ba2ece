"""Prometheus metrics of the proxy: declared once in a registry of its own, and fed in one place, by the
listener at the end of this module. The rest of the proxy emits plain events (proxy/telemetry.py) and finished
requests (`Services.finish` calls `observe_request`); none of it imports a metric.

Per-model series are labelled `model_name`, as vLLM labels its own, so one dashboard can join them.

Loops follow `proxy.store.queries`' definition so `/metrics` and `/stats/models` count the same thing: a
run is consecutive error calls (`Verdict.is_error`) of one session and one model with the same
`Verdict.loop_key`; it becomes a loop when it reaches the policy's `loop_min_attempts`, and is counted
once, at that moment. The tracker keeps one small entry per recently active session, so it costs a
dictionary update per judged call.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Info, disable_created_metrics
from prometheus_client import Counter as _Counter
from prometheus_client import Gauge as _Gauge
from prometheus_client import Histogram as _Histogram

from proxy import __version__, telemetry
from proxy.record import RequestRecord

__all__ = [
    "LOOP_TRACKER",
    "MULTIPROCESS_DIR",
    "OTHER_LABEL",
    "REGISTRY",
    "LoopTracker",
    "bound_label",
    "note_served_models",
    "observe_request",
    "scrape_registry",
]

# The `_created` series double every counter's output and no dashboard reads them.
disable_created_metrics()

REGISTRY = CollectorRegistry(auto_describe=True)

# Set by `serve --workers N` for its workers (prometheus_client's multiprocess mode: each process's values in files
# of this directory, read when scraped), so that /metrics says what all of them did, whichever worker answers.
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
_scraped: CollectorRegistry | None = None


def scrape_registry() -> CollectorRegistry:
    """What /metrics and the webhook read: this process's registry, or under `serve --workers N` every worker's
    series combined (counters and histograms summed, each gauge by its `multiprocess_mode`), and the build info."""
    global _scraped
    path = os.environ.get(MULTIPROCESS_DIR)
    if not path:
        return REGISTRY
    if _scraped is None:
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry(auto_describe=True)
        MultiProcessCollector(registry, path=path)
        registry.register(BUILD_INFO)
        _scraped = registry
    return _scraped

# Label values come from clients (model names, paths): each new value is a new series kept forever, so a
# label takes at most this many distinct values and every later one shares OTHER_LABEL.
_MAX_LABEL_VALUES = 200
OTHER_LABEL = "other"
_seen: dict[str, set[str]] = {}
# A `model_name` label carries only a model an upstream serves (listed in its config or its /v1/models): any
# client may name any model, and unknown names must not take the label's room. Every other name reads "other".
_served_models: set[str] = set()
_MODEL_LABEL = "model_name"
# Labels whose values come from the operator's configuration, never from a client: each keeps its own series
# however many values a long-lived process has seen (an upstream the probe reports must never read "other").
_CONFIGURED = frozenset({"upstream"})


def note_served_models(names: Any) -> None:
    """Names an upstream serves: each may be a `model_name` label value of its own."""
    for name in names:
        if isinstance(name, str) and len(_served_models) < 10 * _MAX_LABEL_VALUES:
            _served_models.add(name)


def bound_label(name: str, value: Any) -> str:
    """The value a metric label `name` may carry for `value`: itself while the label has room, else "other".
    Paths naming a model (`/models/<id>`) share one value, whatever the id."""
    text = str(value)
    if name in _CONFIGURED:
        return text
    if name == _MODEL_LABEL and text and text not in _served_models:
        return OTHER_LABEL
    if name == "route" and "/models/" in text:
        text = text[: text.index("/models/")] + "/models/{id}"
    seen = _seen.setdefault(name, set())
    if text in seen:
        return text
    if len(seen) >= _MAX_LABEL_VALUES:
        return OTHER_LABEL
    seen.add(text)
    return text


class _Bounded:
    """A metric of this registry whose label values are bounded (`bound_label`)."""

    _labelnames: tuple[str, ...]

    def __init__(self, name: str, documentation: str, labelnames: Any = (), **kwargs: Any) -> None:
        # The child for label values given as strings, each its own label: a request updates a dozen series, and
        # bounding and looking up each one's values again was most of what the metrics cost it.
        self._by_values: dict[tuple[str, ...], Any] = {}
        super().__init__(name, documentation, labelnames, registry=REGISTRY, **kwargs)  # type: ignore[call-arg]

    def labels(self, *values: Any, **named: Any) -> Any:
        child = self._by_values.get(values) if not named else None
        if child is not None:
            return child
        bounded = [bound_label(n, v) for n, v in zip(self._labelnames, values, strict=False)]
        child = super().labels(*bounded, **{k: bound_label(k, v) for k, v in named.items()})  # type: ignore[misc]
        # Only a value that is its own label stays so (a model served later may leave "other"); bounded in number.
        if (not named and len(self._by_values) < _MAX_CACHED_CHILDREN and OTHER_LABEL not in bounded
                and all(type(v) is str for v in values)):
            self._by_values[values] = child
        return child


_MAX_CACHED_CHILDREN = 4096


class Counter(_Bounded, _Counter):
    pass


class Gauge(_Bounded, _Gauge):
    pass


class Histogram(_Bounded, _Histogram):
    pass


BUILD_INFO = Info("allowlist_proxy_build", "The running proxy's version", registry=REGISTRY)
BUILD_INFO.info({"version": __version__})
# Under `serve --workers N` each worker counts into files the parent's /metrics sums (`scrape_registry`); a gauge
# says how its workers' values combine (one process: ignored).
UPSTREAM_UP = Gauge("allowlist_proxy_upstream_up", "1 when the upstream answered its last /v1/models probe, else 0",
                    ["upstream"], multiprocess_mode="livemostrecent")

_MODEL = ["model_name"]  # the label of the per-model series
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

REQUESTS = Counter("allowlist_proxy_requests", "Client requests by model, route and status",
                   [*_MODEL, "route", "status"])
TOOL_CALLS = Counter("allowlist_proxy_tool_calls", "Judged tool calls by model, decision and primary reason",
                     [*_MODEL, "decision", "reason"])
RETRIES = Counter("allowlist_proxy_retries", "Extra upstream attempts after a rejection", _MODEL)
BUDGET_EXHAUSTED = Counter("allowlist_proxy_budget_exhausted", "Requests whose retry budget ran out", _MODEL)
IN_FLIGHT = Gauge("allowlist_proxy_in_flight", "Requests in flight by model", _MODEL, multiprocess_mode="livesum")
UPSTREAM_LATENCY = Histogram(
    "allowlist_proxy_upstream_seconds",
    "One upstream attempt, request sent to last byte read; outcome ok, http_error (a non-200 answer) or error",
    [*_MODEL, "upstream", "outcome"], buckets=_LATENCY_BUCKETS)
REQUEST_LATENCY = Histogram(
    "allowlist_proxy_request_seconds",
    "One client request, retries included, by its outcome (ok, blocked, upstream_error, client_disconnected, ...)",
    [*_MODEL, "outcome"], buckets=_LATENCY_BUCKETS)
UNGOVERNED_TEXT = Counter("allowlist_proxy_ungoverned_text_actions",
                          "Turns of a recognised text-acting client holding actions the proxy could not read or judge",
                          [*_MODEL, "client"])
SECRETS_REDACTED = Counter(
    "allowlist_proxy_secrets_redacted",
    "Secrets replaced by [redacted: TYPE] in requests before they went upstream (tool results, inlined files), by "
    "detection rule; a secret re-sent in a later request of the conversation is replaced, and counted, again",
    [*_MODEL, "type"])
BLOCKED_TURNS = Counter("allowlist_proxy_blocked_turns",
                        "Client requests answered with a block message: the retry budget ran out", _MODEL)
POLICY_RELOAD_FAILURES = Counter("allowlist_proxy_policy_reload_failures", "Policy files refused at load or reload",
                                 ["file"])
POLICY_VALID = Gauge("allowlist_proxy_policy_valid",
                     "1 when the file on disk is the policy being served, 0 when it was refused", ["file"],
                     multiprocess_mode="livemin")
POLICY_HELD = Gauge("allowlist_proxy_policy_held",
                    "1 while the file holds an edit that widens the policy, held until SIGHUP applies it; else 0",
                    ["file"], multiprocess_mode="livemax")
STORE_WRITE_FAILURES = Counter("allowlist_proxy_store_write_failures", "Failed batch writes to the store (retried)")
STORE_UP = Gauge("allowlist_proxy_store_up", "1 while the store can record, 0 while it fails (health: degraded)",
                 multiprocess_mode="livemin")
STORE_QUEUE_DEPTH = Gauge("allowlist_proxy_store_queue_depth", "Rows waiting for the store writer",
                          multiprocess_mode="livesum")
LOOPS = Counter(
    "allowlist_proxy_loops",
    "Retry-variant loops: a session's consecutive same-shape rejections reaching the policy's loop_min_attempts",
    _MODEL)
FIRST_TOKEN_LATENCY = Histogram(
    "allowlist_proxy_upstream_first_token_seconds", "Time to the first token of streamed requests", _MODEL,
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
TOKENS = Counter("allowlist_proxy_tokens", "Tokens the upstream reported in its usage, by kind (prompt | completion)",
                 [*_MODEL, "kind"])
MODEL_NOT_FOUND = Counter("allowlist_proxy_model_not_found",
                          "Requests refused because no upstream serves the model they named", _MODEL)
UNGOVERNED_REQUESTS = Counter(
    "allowlist_proxy_ungoverned_requests",
    "Requests offering tools none of which a tool profile (or the shell heuristic) governs", _MODEL)

STORE_ROWS_LOST = Counter("allowlist_proxy_store_rows_lost",
                          "Rows the store never got: queue full, store down at shutdown, row refused", ["table"])
STORE_ROWS_REPAIRED = Counter(
    "allowlist_proxy_store_rows_repaired",
    "Rows the database refused as they came and took with their text made safe (NUL escaped, cut)")
STORE_UNRECORDED_RELEASES = Counter(
    "allowlist_proxy_store_unrecorded_releases",
    "Calls released before the store committed them (on_store_failure: continue)", _MODEL)
STORE_REFUSALS = Counter(
    "allowlist_proxy_store_refusals",
    "Requests refused with 503 because the store could not record (on_store_failure: refuse)", _MODEL)
RELEASE_WAIT = Histogram(
    "allowlist_proxy_release_wait_seconds", "Time a judged call waited for its rows to be committed (enforce)",
    buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 5))
UPSTREAM_ERRORS = Counter(
    "allowlist_proxy_upstream_errors",
    "Client requests answered with an upstream failure (502 unreachable or broken, 504 timeout, or the "
    "upstream's own error status)", [*_MODEL, "status"])
CONNECTION_LIMITS = Counter(
    "allowlist_proxy_connection_limits",
    "Client connections closed or refused by a limit (header_timeout | body_timeout | idle | too_many)", ["limit"])


# -- the one listener ---------------------------------------------------------------------------------------

@dataclass(slots=True)
class _Run:
    model: str
    shape: str | None  # None: the session's last call was allowed
    length: int


class LoopTracker:
    def __init__(self, max_sessions: int = 50_000) -> None:
        # Least recently active sessions are forgotten first; a session idle that long has no run worth counting.
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._max = max_sessions

    def observe(self, session: str, model: str, is_error: bool, loop_key: str | None,
                loop_min_attempts: int) -> bool:
        """Feed one judged call, in session order; True when it made its run a loop."""
        run = self._runs.get(session)
        if not is_error:
            self._remember(session, _Run(model, None, 0))
            return False
        if run is not None and run.shape == loop_key and run.model == model:
            run.length += 1
            self._runs.move_to_end(session)
        else:
            run = _Run(model, loop_key, 1)
            self._remember(session, run)
        if run.length == max(1, loop_min_attempts):
            LOOPS.labels(model).inc()
            return True
        return False

    def _remember(self, session: str, run: _Run) -> None:
        self._runs[session] = run
        self._runs.move_to_end(session)
        while len(self._runs) > self._max:
            self._runs.popitem(last=False)


LOOP_TRACKER = LoopTracker()


def observe_request(record: RequestRecord) -> None:
    """Services listener, for every finished request: counted by route and status, its latency by outcome,
    first-token latency of streamed requests, blocked turns, and the tokens the upstream counted."""
    REQUESTS.labels(record.model, record.route, str(record.status)).inc()
    if record.outcome == "upstream_error":
        UPSTREAM_ERRORS.labels(record.model, str(record.status)).inc()
    REQUEST_LATENCY.labels(record.model, record.outcome).observe((record.duration_ms or 0) / 1000.0)
    if record.outcome == "blocked":
        BLOCKED_TURNS.labels(record.model).inc()
    if record.stream and record.ttft_ms is not None and record.outcome == "ok":
        FIRST_TOKEN_LATENCY.labels(record.model).observe(record.ttft_ms / 1000.0)
    if record.usage.seen:
        TOKENS.labels(record.model, "prompt").inc(record.usage.prompt_tokens)
        TOKENS.labels(record.model, "completion").inc(record.usage.completion_tokens)


def _call_judged(e: telemetry.CallJudged) -> None:
    TOOL_CALLS.labels(e.model, e.decision, e.reason).inc()
    LOOP_TRACKER.observe(e.session, e.model, e.is_error, e.loop_key, e.loop_min_attempts)


def _in_flight(e: telemetry.InFlight) -> None:
    IN_FLIGHT.labels(e.model).inc(e.change)


def _store_health(e: telemetry.StoreHealth) -> None:
    STORE_UP.set(1 if e.up else 0)


def _policy_refused(e: telemetry.PolicyFileRefused) -> None:
    POLICY_RELOAD_FAILURES.labels(file=e.file).inc()
    POLICY_VALID.labels(file=e.file).set(0)


_HANDLERS: dict[type, Callable[[Any], None]] = {
    telemetry.CallJudged: _call_judged,
    telemetry.AttemptRetried: lambda e: RETRIES.labels(e.model).inc(),
    telemetry.BudgetSpent: lambda e: BUDGET_EXHAUSTED.labels(e.model).inc(),
    telemetry.UngovernedText: lambda e: UNGOVERNED_TEXT.labels(e.model, e.client).inc(),
    telemetry.SecretsRedacted: lambda e: SECRETS_REDACTED.labels(e.model, e.type).inc(e.count),
    telemetry.UngovernedRequest: lambda e: UNGOVERNED_REQUESTS.labels(e.model).inc(),
    telemetry.InFlight: _in_flight,
    telemetry.PassthroughAnswered: lambda e: REQUESTS.labels("", e.route, str(e.status)).inc(),
    telemetry.ConnectionLimited: lambda e: CONNECTION_LIMITS.labels(e.limit).inc(),
    telemetry.UpstreamAttempt: lambda e: UPSTREAM_LATENCY.labels(e.model, e.upstream, e.outcome).observe(e.seconds),
    telemetry.UpstreamProbed: lambda e: UPSTREAM_UP.labels(e.upstream).set(int(e.up)),
    telemetry.ModelsServed: lambda e: note_served_models(e.names),
    telemetry.ModelNotFound: lambda e: MODEL_NOT_FOUND.labels(e.model).inc(),
    telemetry.PolicyFileLoaded: lambda e: POLICY_VALID.labels(file=e.file).set(1),
    telemetry.PolicyFileRefused: _policy_refused,
    telemetry.PolicyFileHeld: lambda e: POLICY_HELD.labels(file=e.file).set(int(e.held)),
    telemetry.StoreQueue: lambda e: STORE_QUEUE_DEPTH.set(e.depth),
    telemetry.StoreHealth: _store_health,
    telemetry.StoreWriteFailed: lambda e: STORE_WRITE_FAILURES.inc(),
    telemetry.StoreRowRepaired: lambda e: STORE_ROWS_REPAIRED.inc(),
    telemetry.StoreRowLost: lambda e: STORE_ROWS_LOST.labels(e.table).inc(),
    telemetry.ReleaseWaited: lambda e: RELEASE_WAIT.observe(e.seconds),
    telemetry.ReleasedUnrecorded: lambda e: STORE_UNRECORDED_RELEASES.labels(e.model).inc(e.calls),
    telemetry.StoreRefused: lambda e: STORE_REFUSALS.labels(e.model).inc(),
}


def _listen(event: object) -> None:
    handler = _HANDLERS.get(type(event))
    if handler is not None:
        handler(event)


# Whatever loads the metrics (the app for /metrics, Services, a test reading REGISTRY) counts from then on.
telemetry.subscribe(_listen)
