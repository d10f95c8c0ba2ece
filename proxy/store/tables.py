"""The store's tables (SQLAlchemy Core: the writer inserts in batches and the stats are plain SQL).

Times are Unix seconds as floats so that window arithmetic is the same SQL on SQLite and Postgres.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean, Column, Float, Index, Integer, MetaData, String, Table, Text,
)

__all__ = ["metadata", "requests", "sessions", "tool_call_reasons", "tool_calls"]

metadata = MetaData()

sessions = Table(
    "sessions",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("source", String(32), nullable=False),  # header | custom_header | lineage
    Column("model", String(256)),
    Column("created_at", Float, nullable=False),
)

requests = Table(
    "requests",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("session_id", String(128), nullable=False),
    Column("model", String(256), nullable=False),
    Column("route", String(64), nullable=False),
    Column("upstream", String(512), nullable=False),
    Column("stream", Boolean, nullable=False),
    Column("started_at", Float, nullable=False),
    Column("ttfb_ms", Float),
    Column("ttft_ms", Float),
    Column("duration_ms", Float),
    Column("status", Integer),
    Column("outcome", String(32), nullable=False),  # ok | upstream_error | client_disconnected | ...
    Column("error", Text),
    Column("prompt_tokens", Integer),
    Column("completion_tokens", Integer),
    Column("cached_tokens", Integer),
    Column("concurrency", Integer, nullable=False),
    Column("attempts", Integer, nullable=False, default=1),
    Column("budget_exhausted", Boolean, nullable=False, default=False),
    Column("policy_name", String(128)),
    Column("policy_hash", String(64)),
    Column("mode", String(16)),
    Index("ix_requests_model_started", "model", "started_at"),
    Index("ix_requests_session", "session_id"),
)

tool_calls = Table(
    "tool_calls",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("request_id", String(64), nullable=False),
    Column("session_id", String(128), nullable=False),
    Column("model", String(256), nullable=False),
    Column("route", String(64), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("call_index", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("tool_name", String(256), nullable=False),
    Column("source", String(32), nullable=False),  # openai | qwen3_coder | hermes
    Column("arguments_raw", Text, nullable=False),
    Column("arguments_json", Text),  # the parsed object; NULL when malformed
    Column("command", Text),  # the shell command of a bash call, for display and rechecks
    Column("decision", String(16), nullable=False),  # allow | reject | malformed
    Column("primary_reason", String(32)),
    Column("reasons", Text, nullable=False, default=""),  # comma-separated, primary first
    Column("shape", String(256)),
    Column("policy_name", String(128)),
    Column("policy_hash", String(64)),
    Column("mode", String(16)),
    Column("delivered", Boolean, nullable=False, default=True),  # reached the client
    Index("ix_tool_calls_model_created", "model", "created_at"),
    Index("ix_tool_calls_session_created", "session_id", "created_at", "call_index"),
    Index("ix_tool_calls_request", "request_id"),
)

# One row per (call, reason) so reason counts are a GROUP BY on any database.
tool_call_reasons = Table(
    "tool_call_reasons",
    metadata,
    Column("tool_call_id", String(64), primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("reason", String(32), nullable=False),
    Column("model", String(256), nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_tool_call_reasons_model_created", "model", "created_at"),
)
