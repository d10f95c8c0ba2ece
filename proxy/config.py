"""Settings, declared once: each has a name, a default and a help text, and is read from a
command-line flag, the environment variable ALLOWLIST_PROXY_<NAME> or the config file, in that order.

The config file (`allowlist-proxy.yaml` in the working directory, or the `config` setting) holds the
same names as keys, plus `upstreams:` for several upstreams routed by model.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

# The URL rules belong to the store's dialect seam; re-exported here for the settings' readers.
from proxy.store.dialect import check_db_url, normalize_db_url

__all__ = ["DEFAULT_CONFIG_FILE", "ConfigError", "Settings", "UpstreamConfig", "normalize_db_url"]

DEFAULT_CONFIG_FILE = "allowlist-proxy.yaml"
LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(Exception):
    """A setting that cannot be used: `setting` names it, `message` says what is wrong and what to do."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        self.message = message


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


class _ConfigFileSource(PydanticBaseSettingsSource):
    """The YAML config file, below flags and environment; unknown keys are refused with the file named."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self.path = path

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads the whole file at once

    def __call__(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            data = yaml.safe_load(self.path.read_text()) or {}
        except OSError as exc:
            raise ConfigError("config", f"cannot read {self.path}: {exc.strerror or exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError("config", _yaml_error(self.path, exc)) from exc
        if not isinstance(data, dict):
            raise ConfigError("config", f"{self.path} must be a mapping of setting names to values")
        unknown = sorted(set(data) - set(self.settings_cls.model_fields) - {"config"}, key=str)
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), list(self.settings_cls.model_fields), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(str(unknown[0]), f"unknown setting in {self.path}; {hint}known: "
                                               f"{', '.join(self.settings_cls.model_fields)}")
        return {k: v for k, v in data.items() if k != "config"}


def _yaml_error(path: Path, exc: yaml.YAMLError) -> str:
    """One line: `file:line:column: what is wrong`, as editors and compilers write it."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    return f"{where}: not valid YAML: {problem}"


def config_file_path(init_kwargs: dict[str, Any]) -> Path | None:
    given = init_kwargs.get("config") or os.environ.get("ALLOWLIST_PROXY_CONFIG")
    if given:
        path = Path(given)
        if not path.is_file():
            raise ConfigError("config", f"{path} does not exist: give the path of an allowlist-proxy.yaml")
        return path
    local = Path(DEFAULT_CONFIG_FILE)
    return local if local.is_file() else None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ALLOWLIST_PROXY_", extra="ignore")

    config: Path | None = Field(
        None, description=f"YAML file with these settings as keys; default ./{DEFAULT_CONFIG_FILE} when present."
    )
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8080, description="Port to listen on (0 picks a free one).")
    workers: int | Literal["auto"] = Field(
        1, description="Serving processes on the one port (auto: one per CPU core this process may run on); more "
        "than 1 starts a parent that binds the port, migrates the store once, then starts, watches and restarts them."
    )
    upstream: str = Field("http://127.0.0.1:8000/v1", description="Base URL of the OpenAI-compatible upstream.")
    upstream_api_key: str | None = Field(
        None, description="If set, replaces the client's Authorization with `Bearer <key>` upstream."
    )
    upstreams: list[UpstreamConfig] = Field(
        default_factory=list,
        description="Several upstreams routed by model: a list of {url, models: [names] | auto, api_key}; "
                    "replaces `upstream` when set.",
    )
    db: str = Field("sqlite:///allowlist-proxy.db", description="Database URL of the store (SQLite or Postgres).")
    policy: Path | None = Field(
        None, description="Policy file; default policies/strict.yaml, else the packaged strict policy."
    )
    policy_header: bool = Field(
        False, description="Let a request pick another loaded policy with the x-allowlist-policy header."
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
    model_aliases: dict[str, str] = Field(
        default_factory=dict, description="JSON map of model names rewritten before forwarding."
    )
    models_cache_seconds: float = Field(10.0, description="How long the upstream's /v1/models answer is reused.")
    connect_timeout: float = Field(5.0, description="Seconds to connect to the upstream.")
    read_timeout: float = Field(600.0, description="Seconds the upstream may stay silent before a 504.")
    max_body_bytes: int = Field(32 * 1024 * 1024, description="Largest request body accepted (413 above).")
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
    admin_token: str | None = Field(None, description="If set, /stats, /policies and /metrics need this bearer.")
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Host names served besides the listen address (and localhost on a loopback "
        "bind), comma-separated: `name` (any port) or `name:port`; `*` serves any Host. Others get 400."
    )
    allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Browser origins (scheme://host[:port]) whose requests are served, "
        "comma-separated; a request with another Origin gets 403, one without Origin is served."
    )
    max_connections_per_client: int = Field(
        500, description="Most connections one peer address holds at once (half of max_connections by default, so one "
        "peer cannot take every slot); past it the peer's oldest idle one is closed, else the new one."
    )
    max_tools: int = Field(1000, description="Most tools one request may offer (400 above).")
    max_messages: int = Field(10_000, description="Most messages (or input items) one request may carry (400 above).")
    log_level: str = Field("info", description="Log level: debug, info, warning, error.")
    log_format: str = Field("json", description="Log format: json (one object a line) or console (for people).")
    throughput_window_seconds: float = Field(
        10.0, description="Length of one live throughput window in seconds (vLLM logs every 10 s)."
    )
    store_batch_size: int = Field(500, description="Most rows the store writer inserts in one transaction.")
    store_flush_seconds: float = Field(
        0.05, description="Longest a row nobody waits for stays in the writer's queue (observe mode's record bound)."
    )
    store_max_queue: int = Field(
        100_000, description="Most rows waiting for the store; beyond, rows are dropped (counted) and health degrades."
    )
    figures_process: bool | None = Field(
        None, description="Compute the stats routes' figures in a worker process of their own, so that relayed "
        "streams never wait for them: unset, wherever the proxy runs as `allowlist-proxy serve`."
    )
    on_store_failure: Literal["refuse", "continue"] = Field(
        "refuse", description="Enforce mode, store cannot record: refuse (503, nothing delivered unrecorded) "
        "or continue (deliver; counted and logged)."
    )
    store_release_timeout_seconds: float = Field(
        30.0, description="Longest a judged call waits for its rows to be committed before on_store_failure applies."
    )
    retention_days: float | None = Field(
        None, gt=0, description="Keep this many days of rows; older ones (and their hourly figures) are pruned "
        "hourly in the background. Unset: keep everything (`allowlist-proxy db prune --before DATE` by hand)."
    )
    alert_webhook_url: str | None = Field(
        None, description="POST a JSON object here for each alert event (loop rate or blocked turns high, upstream "
        "down, policy reload refused, store degraded, release wait high); unset: no webhook."
    )
    alert_webhook_interval_seconds: float = Field(
        300.0, gt=0, description="At most one webhook post per event and subject (model, upstream, file) this often."
    )
    header_timeout_seconds: float = Field(
        10.0, description="A client connection that sends no complete request head within this is closed."
    )
    body_timeout_seconds: float = Field(
        60.0, description="A request body that stops arriving for this long is answered 408."
    )
    keepalive_timeout_seconds: float = Field(
        5.0, description="An idle keep-alive client connection is closed after this."
    )
    max_connections: int = Field(
        1000, description="Most client connections at once; more are answered 503 and closed at once."
    )

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = config_file_path(getattr(init_settings, "init_kwargs", {}))
        if path is not None:
            from .policy.protected import register_own_files  # the config is not the agent's to change either

            register_own_files((str(path),))
        return init_settings, env_settings, _ConfigFileSource(settings_cls, path)

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

    @field_validator("session_header", "allowed_hosts", "allowed_origins", mode="before")
    @classmethod
    def _header_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("session_header", "allowed_hosts", "allowed_origins")
    @classmethod
    def _lower_headers(cls, value: list[str]) -> list[str]:
        return [header.lower() for header in value]

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

    @field_validator("upstream")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.lower() not in LOG_LEVELS:
            raise ValueError(f"{value!r} is not a log level; use one of {', '.join(LOG_LEVELS)}")
        return value.lower()

    @field_validator("log_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value.lower() not in ("json", "console"):
            raise ValueError(f"{value!r} is not a log format; use json or console")
        return value.lower()

    @field_validator("db")
    @classmethod
    def _database_url(cls, value: str) -> str:
        check_db_url(value)
        return value

    @property
    def async_db_url(self) -> str:
        return normalize_db_url(self.db)

    def upstream_list(self) -> list[UpstreamConfig]:
        """The upstreams to route to: `upstreams`, else the one `upstream` with its key."""
        if self.upstreams:
            return list(self.upstreams)
        return [UpstreamConfig(url=self.upstream, api_key=self.upstream_api_key)]
