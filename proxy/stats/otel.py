"""OpenTelemetry traces of the judged requests, exported over OTLP/HTTP (the `[otel]` extra); imported only
when tracing is on (proxy/stats/traces.py).

One span per client request (kind SERVER, named `{gen_ai.operation.name} {gen_ai.request.model}`), with a
child span per upstream attempt (CLIENT, the same name), per judged call (`judge {gen_ai.tool.name}`) and per
release wait (`allowlist.release_wait`). The attributes follow the GenAI semantic conventions
(`gen_ai.operation.name`, `gen_ai.provider.name` and the older `gen_ai.system`, `gen_ai.request.model`,
`gen_ai.response.model`, `gen_ai.usage.input_tokens` / `output_tokens`, `gen_ai.tool.name`,
`gen_ai.tool.call.id`) plus the proxy's own: `allowlist.decision` (a call's; on the request, the strictest of its
calls'), `allowlist.reasons`, `allowlist.session`, `allowlist.outcome`, `allowlist.attempts`,
`allowlist.policy`. No prompt, completion or argument text is exported: traces leave the machine.

The spans are made from what the proxy does anyway: the request's record (`proxy/tracing.py` begins it, and
`Services.finish` hands every finished record to `finish`), and the events the upstream attempts and the
release wait emit (proxy/telemetry.py), each placed under the request whose task emitted it. A `traceparent`
the client sent becomes the request span's parent, and the upstream gets the request span's own, so vLLM's
spans (`--otlp-traces-endpoint`) join the same trace. The provider is the proxy's own, not the global one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from proxy import __version__, telemetry, tracing

__all__ = ["OtelTraces"]

# The OpenAI-style route each judged request came in on, as a GenAI operation.
_OPERATIONS = {"chat": "chat", "messages": "chat", "responses": "chat", "completions": "text_completion"}
_PROVIDER = "vllm"
# Strictest first: a request's decision is the first of these any of its calls got.
_STRICTNESS = ("malformed", "reject", "repaired", "allow")
# Outcomes that are failures of the exchange (a blocked turn is the policy working, not an error).
_ERRORS = frozenset({"upstream_error", "store_unavailable", "client_disconnected", "model_not_found"})
_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(slots=True)
class _RequestTrace:
    span: Any
    context: Any  # the OpenTelemetry context whose current span is `span`, for its children
    operation: str
    model: str
    attempts: int = 0
    decisions: set[str] = field(default_factory=set)
    reasons: set[str] = field(default_factory=set)


@lru_cache(maxsize=64)
def _server(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.hostname or "", port


class OtelTraces:
    """The installed tracer (`proxy.tracing.Tracer`) and the telemetry listener that adds attempts and waits."""

    def __init__(self, endpoint: str, *, exporter: Any = None) -> None:
        self.endpoint = endpoint
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "allowlist-proxy",
                                    "service.version": __version__})
        self.provider = TracerProvider(resource=resource)
        self.processor = BatchSpanProcessor(exporter or OTLPSpanExporter(endpoint=endpoint))
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("allowlist-proxy", __version__)

    # -- on and off -----------------------------------------------------------------------------------

    def start(self) -> None:
        tracing.install(self)
        telemetry.subscribe(self._event)

    def close(self) -> None:
        """Stops tracing and exports what is left (blocking: call it in a thread)."""
        telemetry.unsubscribe(self._event)
        tracing.uninstall(self)
        self.provider.shutdown()

    def flush(self, timeout_seconds: float = 10.0) -> bool:
        return self.provider.force_flush(int(timeout_seconds * 1000))

    # -- the request -------------------------------------------------------------------------------

    def begin(self, record: Any, incoming: Mapping[str, str], outgoing: MutableMapping[str, str]) -> _RequestTrace:
        operation = _OPERATIONS.get(record.route, "chat")
        parent = _PROPAGATOR.extract(incoming) if "traceparent" in incoming else None
        host, port = _server(record.upstream)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation, "gen_ai.provider.name": _PROVIDER, "gen_ai.system": _PROVIDER,
            "gen_ai.request.model": record.model, "allowlist.session": record.session.id,
            "allowlist.session_source": record.session.source, "allowlist.route": record.route,
            "allowlist.stream": record.stream, "allowlist.policy": record.policy_name or "",
            "allowlist.mode": record.mode or "", "server.address": host,
        }
        if port is not None:
            attributes["server.port"] = port
        span = self.tracer.start_span(f"{operation} {record.model}", context=parent, kind=SpanKind.SERVER,
                                      attributes=attributes, start_time=int(record.started_at * 1e9))
        context = trace.set_span_in_context(span)
        # The upstream continues this trace (vLLM reads `traceparent`), not the client's span above it.
        for key in [k for k in outgoing if k.lower() in ("traceparent", "tracestate")]:
            del outgoing[key]
        _PROPAGATOR.inject(outgoing, context=context)
        return _RequestTrace(span, context, operation, record.model)

    def judged(self, trace_: _RequestTrace, call: Any, verdict: Any, started_ns: int, ended_ns: int) -> None:
        decision = str(verdict.decision)
        reasons = [str(r) for r in verdict.reasons]
        trace_.decisions.add(decision)
        trace_.reasons.update(reasons)
        attributes: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
                                      "allowlist.decision": decision, "allowlist.reasons": reasons}
        if call.id:
            attributes["gen_ai.tool.call.id"] = call.id
        if verdict.shape:
            attributes["allowlist.shape"] = verdict.shape
        span = self.tracer.start_span(f"judge {call.name}", context=trace_.context, kind=SpanKind.INTERNAL,
                                      attributes=attributes, start_time=started_ns)
        span.end(end_time=ended_ns)

    def finish(self, record: Any) -> None:
        """`Services.finish` listener: the request's span ends with what became of it."""
        trace_ = record.trace
        if not isinstance(trace_, _RequestTrace):
            return
        record.trace = None
        span = trace_.span
        usage = record.usage
        attributes: dict[str, Any] = {"allowlist.outcome": record.outcome, "allowlist.attempts": record.attempts}
        if record.status is not None:
            attributes["http.response.status_code"] = record.status
        if usage.seen:
            attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.completion_tokens
            if usage.cached_tokens:
                attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_tokens
        if trace_.attempts and record.outcome not in _ERRORS:
            # vLLM answers under the name it was asked for (it refuses any other): the model sent upstream.
            attributes["gen_ai.response.model"] = record.model
        decision = next((d for d in _STRICTNESS if d in trace_.decisions), None)
        if decision is not None:
            attributes["allowlist.decision"] = decision
            attributes["allowlist.reasons"] = sorted(trace_.reasons)
        if record.outcome in _ERRORS:
            attributes["error.type"] = record.outcome
            span.set_status(Status(StatusCode.ERROR, (record.error or record.outcome)[:200]))
        span.set_attributes(attributes)
        end = record.started_at + (record.duration_ms / 1000.0 if record.duration_ms is not None
                                   else time.time() - record.started_at)
        span.end(end_time=int(end * 1e9))

    # -- what the request's parts emit ----------------------------------------------------------------

    def _event(self, event: object) -> None:
        kind = type(event)
        if kind is telemetry.UpstreamAttempt:
            self._attempt(event)  # type: ignore[arg-type]
        elif kind is telemetry.ReleaseWaited:
            self._release_wait(event)  # type: ignore[arg-type]

    def _attempt(self, event: telemetry.UpstreamAttempt) -> None:
        trace_ = tracing.current()
        if not isinstance(trace_, _RequestTrace):
            return
        trace_.attempts += 1
        end = time.time_ns()
        host, port = _server(event.upstream)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": trace_.operation, "gen_ai.provider.name": _PROVIDER, "gen_ai.system": _PROVIDER,
            "gen_ai.request.model": event.model, "server.address": host, "allowlist.attempt": trace_.attempts,
            "allowlist.outcome": event.outcome,
        }
        if port is not None:
            attributes["server.port"] = port
        span = self.tracer.start_span(f"{trace_.operation} {event.model}", context=trace_.context,
                                      kind=SpanKind.CLIENT, attributes=attributes,
                                      start_time=end - int(event.seconds * 1e9))
        if event.outcome != "ok":
            span.set_attribute("error.type", event.outcome)
            span.set_status(Status(StatusCode.ERROR, event.outcome))
        span.end(end_time=end)

    def _release_wait(self, event: telemetry.ReleaseWaited) -> None:
        trace_ = tracing.current()
        if not isinstance(trace_, _RequestTrace):
            return
        end = time.time_ns()
        span = self.tracer.start_span("allowlist.release_wait", context=trace_.context, kind=SpanKind.INTERNAL,
                                      start_time=end - int(event.seconds * 1e9))
        span.end(end_time=end)
