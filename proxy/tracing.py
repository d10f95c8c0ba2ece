"""Traces of the judged requests, off unless asked for (`otel_endpoint` or OTEL_EXPORTER_OTLP_ENDPOINT).

The request path calls two things here, both of which return at once while no tracer is installed: `begin`
when a judged request's record is made (proxy/enforce/prelude.py) and `judged` for each call judged
(proxy/enforce/judging.py). The upstream attempts and the release wait need no call of their own: the tracer
reads the events the proxy emits anyway (proxy/telemetry.py), and the request ends where every request ends
(`Services.finish`). Nothing here imports OpenTelemetry; the exporter (proxy/stats/otel.py) installs itself
as the `Tracer` only when tracing is on, so an untraced proxy pays one attribute read per call.

The request's trace travels in a context variable set by `begin`: what the request's task and the tasks it
starts (a streamed answer's) emit is placed under it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, MutableMapping
from contextvars import ContextVar
from typing import Any, Protocol

__all__ = ["Tracer", "begin", "current", "install", "judged", "on", "uninstall"]


class Tracer(Protocol):
    def begin(self, record: Any, incoming: Mapping[str, str], outgoing: MutableMapping[str, str]) -> Any:
        """Starts the request's span; may write trace headers into `outgoing` (the upstream's); returns its trace."""

    def judged(self, trace: Any, call: Any, verdict: Any, started_ns: int, ended_ns: int) -> None:
        """One call of the request judged between the two times."""


_tracer: Tracer | None = None
_current: ContextVar[Any] = ContextVar("allowlist_proxy_trace", default=None)


def install(tracer: Tracer) -> None:
    global _tracer
    _tracer = tracer


def uninstall(tracer: Tracer) -> None:
    global _tracer
    if _tracer is tracer:
        _tracer = None


def on() -> bool:
    return _tracer is not None


def current() -> Any:
    """The trace of the request whose task is running, None outside one or while tracing is off."""
    return _current.get()


def begin(record: Any, incoming: Mapping[str, str], outgoing: MutableMapping[str, str]) -> None:
    """A judged request's record was made: its span starts (back-dated to the record's start)."""
    tracer = _tracer
    if tracer is None:
        return
    trace = tracer.begin(record, incoming, outgoing)
    record.trace = trace
    _current.set(trace)


def judged(call: Any, verdict: Any, started_ns: int) -> None:
    """A call of the current request was judged, from `started_ns` (time.time_ns()) to now."""
    tracer, trace = _tracer, _current.get()
    if tracer is not None and trace is not None:
        tracer.judged(trace, call, verdict, started_ns, time.time_ns())
