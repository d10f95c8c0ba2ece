"""Settings, declared once: each has a name, a default and a help text, and is read from a
command-line flag or the environment variable ALLOWLIST_PROXY_<NAME> alike."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["Settings", "normalize_db_url"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ALLOWLIST_PROXY_", extra="ignore")

    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8080, description="Port to listen on.")
    upstream: str = Field("http://127.0.0.1:8000/v1", description="Base URL of the OpenAI-compatible upstream.")
    upstream_api_key: str | None = Field(
        None, description="If set, replaces the client's Authorization with `Bearer <key>` upstream."
    )
    db: str = Field("sqlite:///allowlist-proxy.db", description="Database URL of the store (SQLite or Postgres).")
    policy: Path | None = Field(
        None, description="Policy file; default policies/strict.yaml, else the packaged strict policy."
    )
    policy_header: bool = Field(
        False, description="Let a request pick another loaded policy with the x-allowlist-policy header."
    )
    # The session headers the clients send out of the box: OpenCode `x-session-id`, Claude Code
    # `x-claude-code-session-id`, Codex `session-id`.
    session_header: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["x-session-id", "x-claude-code-session-id", "session-id"],
        description="Headers naming the session, first present wins (comma-separated); else lineage.",
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
    log_level: str = Field("info", description="Log level: debug, info, warning, error.")
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
    on_store_failure: Literal["refuse", "continue"] = Field(
        "refuse", description="Enforce mode, store cannot record: refuse (503, nothing delivered unrecorded) "
        "or continue (deliver; counted and logged)."
    )
    store_release_timeout_seconds: float = Field(
        5.0, description="Longest a judged call waits for its rows to be committed before on_store_failure applies."
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

    @field_validator("model_aliases", mode="before")
    @classmethod
    def _aliases_from_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else {}
        return value

    @field_validator("vllm_version")
    @classmethod
    def _version_or_auto(cls, value: str) -> str:
        value = value.strip()
        if value != "auto" and not re.match(r"^v?\d+\.\d+", value):
            raise ValueError(f"vllm_version must be auto or a version such as 0.23 (got {value!r})")
        return value

    @field_validator("session_header", mode="before")
    @classmethod
    def _header_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("session_header")
    @classmethod
    def _lower_headers(cls, value: list[str]) -> list[str]:
        return [header.lower() for header in value]

    @field_validator("upstream")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @property
    def async_db_url(self) -> str:
        return normalize_db_url(self.db)


def normalize_db_url(url: str) -> str:
    """Accept the URLs people write (`sqlite:///x.db`, `postgresql://...`) and pick the async driver."""
    if url.startswith("sqlite://"):
        return "sqlite+aiosqlite://" + url[len("sqlite://"):]
    if url.startswith("postgres://"):
        return "postgresql+asyncpg://" + url[len("postgres://"):]
    if url.startswith("postgresql://"):
        return "postgresql+asyncpg://" + url[len("postgresql://"):]
    return url
