"""The settings, grouped by the part of the proxy they configure: one model per group, each field declared once
(default and help). Its flat name - the command-line flag, the environment variable ALLOWLIST_PROXY_<NAME> and
the config file's key - is the field's alias where the group prefixes it (`store.batch_size` is
`store_batch_size`) and its own name otherwise (`http.max_body_bytes` is `max_body_bytes`)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_settings import NoDecode

# The URL rules belong to the store's dialect seam.
from proxy.store.dialect import check_db_url

__all__ = ["GROUPS", "LOG_FORMATS", "LOG_LEVELS", "HttpSettings", "PolicySettings", "StatsSettings", "StoreSettings",
           "TelemetrySettings", "UpstreamConfig", "UpstreamSettings"]

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("auto", "json", "console")


class _Group(BaseModel):
    # Built by name (`store.batch_size`) or by flat name (`store_batch_size`); a key of neither is refused where
    # the settings are read (proxy/config/settings.py), with the flat names listed.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=True)


def _listed(value: Any) -> Any:
    """A list setting written as one string: JSON (`["a","b"]`) or comma-separated."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


class UpstreamConfig(BaseModel):
    """One upstream of `upstreams:`; `models: auto` means the names its /v1/models lists."""

    model_config = ConfigDict(extra="forbid")

    url: str
    models: list[str] | Literal["auto"] = "auto"
    api_key: str | None = None

    @field_validator("url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")


class UpstreamSettings(_Group):
    """The vLLM servers the proxy forwards to, and how their answers are read."""

    url: str = Field("http://127.0.0.1:8000/v1", alias="upstream",
                     description="Base URL of the OpenAI-compatible upstream.")
    api_key: str | None = Field(None, alias="upstream_api_key",
                                description="If set, replaces the client's Authorization with `Bearer <key>` upstream.")
    upstreams: list[UpstreamConfig] = Field(
        default_factory=list,
        description="Several upstreams routed by model: a list of {url, models: [names] | auto, api_key}; "
                    "replaces `upstream` when set.",
    )
    model_aliases: dict[str, str] = Field(
        default_factory=dict, description="JSON map of model names rewritten before forwarding."
    )
    models_cache_seconds: float = Field(10.0, description="How long the upstream's /v1/models answer is reused.")
    probe_seconds: float = Field(
        10.0, gt=0, alias="upstream_probe_seconds", description="Every upstream is asked GET /v1/models this often, "
        "traffic or not: /health, the dashboard and allowlist_proxy_upstream_up follow the answers."
    )
    connect_timeout: float = Field(5.0, description="Seconds to connect to the upstream.")
    read_timeout: float = Field(600.0, description="Seconds the upstream may stay silent before a 504.")
    vllm_version: str = Field(
        "auto", description="The upstream's vLLM version, which decides how XML calls in content are read: "
        "auto (read GET /version at start and when the upstream comes back) or a version such as 0.23."
    )
    tool_parser: Literal["qwen3_coder", "qwen3_xml"] = Field(
        "qwen3_coder", description="The upstream's --tool-call-parser for Qwen3 XML: qwen3_coder or qwen3_xml."
    )
    convert_content_tool_calls: bool = Field(
        True, description="Return tool calls found in content (Qwen3-Coder XML, Hermes) as proper tool_calls."
    )

    @field_validator("url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("model_aliases", mode="before")
    @classmethod
    def _aliases_from_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            if not value.strip():
                return {}
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError(f'not JSON ({exc}); write a JSON object such as {{"gpt-4o": "qwen3.5-27b"}}') \
                    from None
        return value

    @field_validator("upstreams", mode="before")
    @classmethod
    def _upstreams_from_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else []
        return value

    @field_validator("vllm_version")
    @classmethod
    def _version_or_auto(cls, value: str) -> str:
        value = value.strip()
        if value != "auto" and not re.match(r"^v?\d+\.\d+", value):
            raise ValueError(f"vllm_version must be auto or a version such as 0.23 (got {value!r})")
        return value

    def routes(self) -> list[UpstreamConfig]:
        """The upstreams to route to: `upstreams`, else the one `upstream` with its key."""
        if self.upstreams:
            return list(self.upstreams)
        return [UpstreamConfig(url=self.url, api_key=self.api_key)]


class StoreSettings(_Group):
    """The durable record: where it is, how rows are written, and what happens when it cannot record."""

    url: str = Field("sqlite:///allowlist-proxy.db", alias="db",
                     description="Database URL of the store (SQLite or Postgres).")
    migrate_on_start: bool = Field(
        True, description="Bring the store's schema to this version's at start (a SQLite store is copied first); "
        "off (serve --no-migrate), a store behind or ahead is refused: replicas, or a store `db upgrade` migrates.")
    batch_size: int = Field(500, alias="store_batch_size",
                            description="Most rows the store writer inserts in one transaction.")
    flush_seconds: float = Field(
        0.05, alias="store_flush_seconds",
        description="Longest a row nobody waits for stays in the writer's queue (observe mode's record bound)."
    )
    max_queue: int = Field(
        100_000, alias="store_max_queue",
        description="Most rows waiting for the store; beyond, rows are dropped (counted) and health degrades."
    )
    on_failure: Literal["refuse", "continue"] = Field(
        "refuse", alias="on_store_failure",
        description="Enforce mode, store cannot record: refuse (503, nothing delivered unrecorded) "
                    "or continue (deliver; counted and logged)."
    )
    release_timeout_seconds: float = Field(
        30.0, alias="store_release_timeout_seconds",
        description="Longest a judged call waits for its rows to be committed before on_store_failure applies."
    )
    retention_days: float | None = Field(
        None, gt=0, description="Keep this many days of rows; older ones (and their hourly figures) are pruned "
        "hourly in the background. Unset: keep everything (`allowlist-proxy db prune --before DATE` by hand)."
    )

    @field_validator("url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        check_db_url(value)
        return value


class HttpSettings(_Group):
    """The edge: where the proxy listens, who may reach it, and the limits on what a client sends."""

    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8080, description="Port to listen on (0 picks a free one).")
    workers: int | Literal["auto"] = Field(
        1, description="Serving processes on the one port (auto: one per CPU core this process may run on); more "
        "than 1 starts a parent that binds the port, migrates the store once, then starts, watches and restarts them."
    )
    admin_token: str | None = Field(None, description="If set, /stats, /policies and /metrics need this bearer.")
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Host names served besides the listen address (and localhost on a loopback "
        "bind), comma-separated: `name` (any port) or `name:port`; `*` serves any Host. Others get 400."
    )
    allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Browser origins (scheme://host[:port]) whose requests are served, "
        "comma-separated; a request with another Origin gets 403, one without Origin is served."
    )
    max_connections: int = Field(
        1000, description="Most client connections at once; more are answered 503 and closed at once."
    )
    max_connections_per_client: int = Field(
        500, description="Most connections one peer address holds at once (half of max_connections by default, so one "
        "peer cannot take every slot); past it the peer's oldest idle one is closed, else the new one."
    )
    max_body_bytes: int = Field(32 * 1024 * 1024, description=(
        "Largest request body accepted (413 above), and largest answer read whole from upstream, its bytes and "
        "what they decode to (502 above)."))
    max_tools: int = Field(1000, description="Most tools one request may offer (400 above).")
    max_messages: int = Field(10_000, description="Most messages (or input items) one request may carry (400 above).")
    header_timeout_seconds: float = Field(
        10.0, description="A client connection that sends no complete request head within this is closed."
    )
    body_timeout_seconds: float = Field(
        60.0, description="A request body that stops arriving for this long is answered 408."
    )
    keepalive_timeout_seconds: float = Field(
        5.0, description="An idle keep-alive client connection is closed after this."
    )
    require_keys: bool = Field(
        False, description="Serve only requests that present a project key (`allowlist-proxy keys create`, `run`): "
        "others get 401. Off, a request without a key is served as before; a key-shaped credential that is not a "
        "known, unrevoked key gets 401 either way."
    )
    key_cache_seconds: float = Field(
        5.0, ge=0, description="How long a process reuses what the store said about a project key: a revoked key "
        "is refused by every worker and replica within this."
    )
    proxy_url: str | None = Field(
        None, description="The URL clients reach the proxy at, for `allowlist-proxy run`; default http://HOST:PORT "
        "(127.0.0.1 for a wildcard host)."
    )

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, value: Any) -> Any:
        text = str(value).strip().lower() if isinstance(value, str | int) and not isinstance(value, bool) else None
        if text == "auto":
            return "auto"
        if text is None or not text.isdigit() or not 1 <= int(text) <= 1024:
            raise ValueError(f"workers must be a whole number from 1 to 1024, or auto (got {value!r})")
        return int(text)

    def worker_count(self) -> int:
        """`workers` as a number: auto is the CPU cores this process may run on (its affinity, a container's
        cpuset), not every core of the machine."""
        if self.workers != "auto":
            return int(self.workers)
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            return max(1, os.cpu_count() or 1)

    @field_validator("allowed_hosts", "allowed_origins", mode="before")
    @classmethod
    def _list(cls, value: Any) -> Any:
        return _listed(value)

    @field_validator("allowed_hosts", "allowed_origins")
    @classmethod
    def _lower(cls, value: list[str]) -> list[str]:
        return [item.lower() for item in value]


class PolicySettings(_Group):
    """Which policy judges a request, and what tells the proxy a request's session and project."""

    file: Path | None = Field(
        None, alias="policy", description="Policy file; default policies/strict.yaml, else the packaged strict policy."
    )
    header: bool = Field(
        False, alias="policy_header",
        description="Let a request pick another loaded policy with the x-allowlist-policy header."
    )
    # The session headers the clients send out of the box: OpenCode `x-session-id`, Claude Code
    # `x-claude-code-session-id`, Codex `session-id` (an older Codex `session_id`).
    session_header: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["x-session-id", "x-claude-code-session-id", "session-id", "session_id"],
        description="Headers naming the session, first present wins (comma-separated); "
                    "else the conversation's own history.",
    )
    project_root_header: str | None = Field(
        None, description="Header a request names its project root in (absolute paths under it pass)."
    )

    @field_validator("session_header", mode="before")
    @classmethod
    def _list(cls, value: Any) -> Any:
        return _listed(value)

    @field_validator("session_header")
    @classmethod
    def _lower(cls, value: list[str]) -> list[str]:
        return [header.lower() for header in value]


class StatsSettings(_Group):
    """Figures from the record: throughput windows, where the figures are computed, and the alert webhook."""

    throughput_window_seconds: float = Field(
        10.0, description="Length of one live throughput window in seconds (vLLM logs every 10 s)."
    )
    figures_process: bool | None = Field(
        None, description="Compute the stats routes' figures in a worker process of their own, so that relayed "
        "streams never wait for them: unset, wherever the proxy runs as `allowlist-proxy serve`."
    )
    alert_webhook_url: str | None = Field(
        None, description="POST a JSON object here for each alert event (loop rate or blocked turns high, upstream "
        "down, policy reload refused, widening policy edit held, store degraded, release wait high), and once "
        "`resolved` when it clears; unset: no webhook."
    )
    alert_webhook_interval_seconds: float = Field(
        300.0, gt=0, description="At most one webhook post per event and subject (model, upstream, file) this often."
    )


class TelemetrySettings(_Group):
    """What the proxy says about itself: its log and its traces."""

    log_level: str = Field("info", description="Log level: debug, info, warning, error.")
    log_format: str = Field("auto", description="Log format: auto (console lines on a terminal, JSON otherwise), json "
                            "(one object a line) or console (for people).")
    otel_endpoint: str | None = Field(
        None, description="Export OpenTelemetry traces (one span per request, with its upstream attempts, judged calls "
        "and release wait) to this OTLP/HTTP collector, e.g. http://127.0.0.1:4318; unset: OTEL_EXPORTER_OTLP_ENDPOINT "
        "if set, else no tracing. Needs the [otel] extra."
    )

    @field_validator("log_level", "log_format")
    @classmethod
    def _known(cls, value: str, info: ValidationInfo) -> str:
        known, what = (LOG_LEVELS, "level") if info.field_name == "log_level" else (LOG_FORMATS, "format")
        if value.lower() not in known:
            raise ValueError(f"{value!r} is not a log {what}; use one of {', '.join(known)}")
        return value.lower()


# group name -> its model, in the order `serve --help`, the banner and the README show them.
GROUPS: dict[str, type[_Group]] = {
    "upstream": UpstreamSettings,
    "store": StoreSettings,
    "http": HttpSettings,
    "policy": PolicySettings,
    "stats": StatsSettings,
    "telemetry": TelemetrySettings,
}
