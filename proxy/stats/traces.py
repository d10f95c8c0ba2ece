"""Whether the proxy exports traces, and where to: the `otel_endpoint` setting, else OpenTelemetry's standard
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT; `OTEL_SDK_DISABLED=true` turns it off.

This module imports no OpenTelemetry: the exporter (proxy/stats/otel.py, the `[otel]` extra) is imported
only when there is somewhere to export to, so a proxy without tracing loads none of it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from proxy.logs import get_logger

__all__ = ["TracesUnavailable", "check_available", "start_traces", "traces_endpoint"]

log = get_logger("proxy.stats.traces")

_INSTALL_HINT = "pip install 'allowlist-proxy[otel]' (opentelemetry-sdk and its OTLP/HTTP exporter)"


class TracesUnavailable(Exception):
    """The `otel_endpoint` setting asks for traces this install cannot export (the [otel] extra is missing)."""


def traces_endpoint(configured: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The OTLP/HTTP URL spans are posted to, or None for no tracing. `otel_endpoint` and
    OTEL_EXPORTER_OTLP_ENDPOINT name the collector's base URL (`/v1/traces` is added);
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT names the whole URL, as the OpenTelemetry specification says."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if configured:
        return _with_path(configured)
    if whole := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip():
        return whole
    if base := env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
        return _with_path(base)
    return None


def _with_path(base: str) -> str:
    base = base.strip().rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


def check_available(configured: str | None) -> None:
    """TracesUnavailable when the `otel_endpoint` setting asks for traces and the [otel] extra is missing: said
    before the server starts (`serve`'s checks), as any other setting that cannot be used."""
    if configured and traces_endpoint(configured) is not None:
        import importlib.util

        for module in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"):
            try:
                found = importlib.util.find_spec(module) is not None
            except (ModuleNotFoundError, ValueError):  # a parent missing, or a module without a spec
                found = False
            if not found:
                raise TracesUnavailable(f"traces need the OpenTelemetry SDK, which is not installed ({module}): "
                                        f"{_INSTALL_HINT}")


def start_traces(configured: str | None) -> Any:
    """The exporter (`OtelTraces`, not started yet), or None when tracing is off; `configured`: the
    `otel_endpoint` setting. Asked for by the setting but not installed: TracesUnavailable (the operator asked
    for something this install cannot do); asked for only by the environment (which other programs share): a
    warning, and no tracing."""
    endpoint = traces_endpoint(configured)
    if endpoint is None:
        return None
    try:
        from proxy.stats.otel import OtelTraces
    except ImportError as exc:
        if configured:
            raise TracesUnavailable(f"traces need the OpenTelemetry SDK, which is not installed ({exc.name}): "
                                    f"{_INSTALL_HINT}") from None
        log.warning("traces.unavailable", endpoint=endpoint, reason=f"{exc.name} is not installed",
                    hint=_INSTALL_HINT)
        return None
    return OtelTraces(endpoint)
