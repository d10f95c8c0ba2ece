"""The store's tables (SQLAlchemy Core: the writer inserts in batches and the stats are plain SQL).

Times are Unix seconds as floats so that window arithmetic is the same SQL on SQLite and Postgres.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

__all__ = ["metadata", "requests", "sessions", "tool_call_reasons", "tool_calls"]

metadata = MetaData()


# Column groups that several tables carry alike; each call makes fresh Columns, as a Column joins one table.

def _session_model_route() -> list[Column]:
    """Who asked, which model answered, and through which route: a request's and each of its calls'."""
    return [
        Column("session_id", String(128), nullable=False),
        Column("model", String(256), nullable=False),
        Column("route", String(64), nullable=False),
    ]


def _judged_by() -> list[Column]:
    """The policy that judged a request or call, and its mode; NULL where none did."""
    return [Column("policy_name", String(128)), Column("policy_hash", String(64)), Column("mode", String(16))]


def _sum_and_count(name: str) -> list[Column]:
    """A mean kept as its sum and its count, so that means over any set of rows are exact."""
    return [Column(f"{name}_sum", Float, nullable=False), Column(f"{name}_n", Integer, nullable=False)]


sessions = Table(
    "sessions",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("source", String(32), nullable=False),  # header | metadata | lineage (custom_header in older rows)
    Column("model", String(256)),
    Column("created_at", Float, nullable=False),
    Column("project_root", String(1024)),  # the root its first request was judged under (0011)
)

requests = Table(
    "requests",
    metadata,
    Column("id", String(64), primary_key=True),
    *_session_model_route(),
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
    *_judged_by(),
    Column("profiles", String(256)),  # the tool profiles chosen for the request's tools, comma-separated
    Column("project_root", String(1024)),  # the root its paths were judged under: pinned or learned (0011)
    # Turns of a text-acting client whose actions passed unread or unjudged; NULL for none (0015).
    Column("ungoverned_text", Integer),
    # ix_requests_ungoverned ("model", "started_at" WHERE ungoverned_text IS NOT NULL) is migration 0015's alone:
    # a partial index's `postgresql_where` here would load Postgres' dialect into every proxy (1.3 MB on SQLite).
    # Likewise ix_requests_failed ("model", "started_at", "outcome" WHERE outcome IN ('blocked', 'upstream_error')),
    # migration 0021's: the blocked turns and upstream errors per model.
    Index("ix_requests_session", "session_id"),
    # Covering index of the stats' request counts, attempts and throughput (migration 0003).
    Index("ix_requests_model_stats", "model", "started_at", "session_id", "attempts", "concurrency",
          "completion_tokens", "duration_ms", "ttft_ms"),
)

tool_calls = Table(
    "tool_calls",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("request_id", String(64), nullable=False),
    *_session_model_route(),
    Column("attempt", Integer, nullable=False),
    Column("call_index", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("tool_name", String(256), nullable=False),
    Column("source", String(32), nullable=False),  # openai | qwen3_coder | hermes
    Column("arguments_raw", Text, nullable=False),
    Column("arguments_json", Text),  # the parsed object; NULL when malformed
    Column("command", Text),  # the shell command of a bash call, for display and rechecks
    Column("decision", String(16), nullable=False),  # allow | reject | malformed | repaired
    Column("primary_reason", String(32)),
    Column("reasons", Text, nullable=False, default=""),  # comma-separated, primary first
    Column("shape", String(256)),
    *_judged_by(),
    Column("delivered", Boolean, nullable=False, default=True),  # reached the client
    # Migration 0008: the command delivered instead of `command` (decision `repaired`), and the session's
    # feedback variant when the policy runs an experiment.
    Column("repaired_command", Text),
    Column("feedback_variant", String(64)),
    Index("ix_tool_calls_request", "request_id"),
    # Covering indexes of the stats (migration 0003): verdict counts per model, and each session's calls in
    # order with what loop detection compares, so neither reads the table.
    Index("ix_tool_calls_model_verdict", "model", "created_at", "decision", "primary_reason"),
    Index("ix_tool_calls_session_order", "session_id", "created_at", "call_index", "decision", "shape",
          "primary_reason", "model"),
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
    Index("ix_tool_call_reasons_model_reason", "model", "created_at", "reason"),  # stats (migration 0003)
)

# Live throughput: one row per model and fixed window (migration 0002). Rows are additive: the ticker writes
# the window's sampled `running` once, and requests that end later add their token shares to the windows they
# overlapped, so every column but `running` is a sum and `running` stays NULL until the window was sampled.
throughput_windows = Table(
    "throughput_windows",
    metadata,
    Column("model", String(256), primary_key=True),
    Column("window_start", Float, primary_key=True),  # Unix seconds, a multiple of `seconds`
    Column("seconds", Float, primary_key=True),  # the window length, so a changed setting never mixes windows
    Column("running", Integer),  # requests in flight at the window's end, like vLLM's `Running: N`
    Column("prompt_tokens", Integer, nullable=False, default=0),  # prefills whose first token came in the window
    Column("generation_tokens", Float, nullable=False, default=0.0),  # shares of completions, by time overlap
    Column("completed_requests", Integer, nullable=False, default=0),
    Index("ix_throughput_windows_start", "window_start"),
)
__all__ += ["throughput_windows"]

# Conversation lineage (migrations 0004, 0011): a digest of a conversation up to a turn the proxy delivered
# (or a response id it returned) -> the sessions that hold it, so that replicas sharing one database continue
# each other's sessions. Identical runs share a digest: one row per session (proxy/sessions/resolve.py).
session_lineage = Table(
    "session_lineage",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("session_id", String(128), primary_key=True),
    Column("created_at", Float, nullable=False),
    Index("ix_session_lineage_session", "session_id", "created_at"),
)
__all__ += ["session_lineage"]

# -- rollups (migration 0005) -------------------------------------------------------------------------------
# The stats' additive figures per hour, kept by the writer in the same transaction as the rows they count, so
# that `/stats/models` over a million calls sums a few thousand rows (see proxy/store/rollups.py). `bucket` is
# the hour's start in Unix seconds; policy "" stands for a row stored without a policy.

def _hour_of_model() -> list[Column]:
    """The leading primary-key columns of every hourly rollup: the hour and the model."""
    return [Column("bucket", Float, primary_key=True), Column("model", String(256), primary_key=True)]


def _latency_bins() -> list[Column]:
    """A latency sketch's bins per concurrency level and kind (ttft | tpot): count and range of each bin."""
    return [
        Column("concurrency", Integer, primary_key=True),
        Column("kind", String(8), primary_key=True),
        Column("bin", Integer, primary_key=True),
        Column("n", Integer, nullable=False),
        Column("low", Float, nullable=False),
        Column("high", Float, nullable=False),
    ]


def _hour_key() -> list[Column]:
    """The leading primary-key columns of the hourly rollups of calls and requests."""
    return [
        *_hour_of_model(),
        Column("policy_name", String(128), primary_key=True),
        Column("route", String(64), primary_key=True),
    ]


stats_calls = Table(
    "stats_calls",
    metadata,
    *_hour_key(),
    Column("decision", String(16), primary_key=True),
    Column("primary_reason", String(32), primary_key=True),  # the decision where the call has no reason
    Column("n", Integer, nullable=False),
    Index("ix_stats_calls_model_bucket", "model", "bucket", "decision", "primary_reason", "n"),
)

stats_reasons = Table(
    "stats_reasons",
    metadata,
    *_hour_key(),
    Column("reason", String(32), primary_key=True),
    Column("n", Integer, nullable=False),
)

stats_requests = Table(
    "stats_requests",
    metadata,
    *_hour_key(),
    Column("attempts", Integer, primary_key=True),
    Column("concurrency", Integer, primary_key=True),
    Column("n", Integer, nullable=False),
    *_sum_and_count("rate"),  # completion tokens per second of the requests that have one
    *_sum_and_count("ttft"),
)

# One row per session and hour it had requests in: distinct sessions over any hours are a COUNT(DISTINCT).
stats_sessions = Table(
    "stats_sessions",
    metadata,
    *_hour_key(),
    Column("session_id", String(128), primary_key=True),
)

# Calls and errors per session and hour (migration 0008): the units of the session bootstrap and the
# permutation test (proxy/stats/confidence.py), summed over whole hours without reading the calls.
stats_session_calls = Table(
    "stats_session_calls",
    metadata,
    *_hour_key(),
    Column("session_id", String(128), primary_key=True),
    Column("calls", Integer, nullable=False),
    Column("errors", Integer, nullable=False),
)

# Streamed requests that ended well, their TTFT and time per output token in logarithmic bins
# (proxy/store/latency_sketch.py): percentiles over any hours within 1%, exact where the data are sparse.
stats_latency = Table(
    "stats_latency",
    metadata,
    *_hour_of_model(),
    *_latency_bins(),
)

# Each session's runs of consecutive error calls of one shape (proxy/store/runs.py), found on the session's
# whole sequence and kept up to date by the writer; a run of at least `loop_min_attempts` is a loop.
error_runs = Table(
    "error_runs",
    metadata,
    Column("session_id", String(128), primary_key=True),
    Column("start_at", Float, primary_key=True),  # the first call's (created_at, call_index)
    Column("start_index", Integer, primary_key=True),
    Column("end_at", Float, nullable=False),
    Column("end_index", Integer, nullable=False),
    Column("model", String(256), nullable=False),
    Column("policy_name", String(128), nullable=False),
    Column("route", String(64), nullable=False),
    Column("shape", String(256), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("exact", Boolean, nullable=False),  # every attempt sent the very same command
    # The session's call after the run, NULL while there is none yet.
    Column("next_at", Float),
    Column("next_index", Integer),
    Column("next_decision", String(16)),
    Index("ix_error_runs_model_start", "model", "start_at", "attempts", "next_decision", "exact"),
    Index("ix_error_runs_attempts", "attempts", "start_at"),
)
__all__ += ["error_runs", "stats_calls", "stats_latency", "stats_reasons", "stats_requests", "stats_session_calls",
            "stats_sessions"]

# -- audit before release (migration 0006) ------------------------------------------------------------------
# A request whose calls were released before it ended: its request row as known at the release, committed with
# the calls' rows. The request's final row replaces it in one transaction; an entry left by a proxy that died is
# turned into a request row with outcome `interrupted` at the next start (proxy/store/journal.py).
request_journal = Table(
    "request_journal",
    metadata,
    Column("id", String(64), primary_key=True),  # the request's id
    Column("owner", String(160), nullable=False),  # the proxy process that wrote it: host:pid:nonce
    Column("created_at", Float, nullable=False),
    Column("row", Text, nullable=False),  # the request row (JSON) as known at the release
    # No index on `owner` (dropped by 0017): recovery reads `owner != me` of a table of the requests in flight.
    sqlite_with_rowid=False,  # a row lives one commit: written into its key's B-tree alone (0017)
)
__all__ += ["request_journal"]

# -- rollups after release (migration 0014) -----------------------------------------------------------------
# The rows of a batch whose hourly rollups are not applied yet: written in the transaction that commits the rows
# (audit before release), deleted in the following one that adds them to the rollups. Whatever is left here
# after a crash is rolled up at the next start (proxy/store/pending_rollups.py).
stats_pending = Table(
    "stats_pending",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("created_at", Float, nullable=False),
    Column("tool_call_ids", Text, nullable=False),  # JSON list
    Column("request_ids", Text, nullable=False),  # JSON list
    sqlite_with_rowid=False,  # a row lives until the next rollup step: written into its key's B-tree alone (0017)
)
__all__ += ["stats_pending"]

# -- all-time totals (migration 0016) ------------------------------------------------------------------------
# What the hourly rollups hold, summed over every hour, for the figures of the whole store (no window, no
# policy or route filter: the dashboard's default): one row per session and model, and per latency bin, kept
# by the writer with the rollups (proxy/store/totals.py). A million calls make tens of thousands of sessions;
# the figures read the few hundred distinct (part, whole) pairs of them through the indexes below.
stats_session_totals = Table(
    "stats_session_totals",
    metadata,
    Column("session_id", String(128), primary_key=True),
    Column("model", String(256), primary_key=True),
    Column("calls", Integer, nullable=False),
    Column("errors", Integer, nullable=False),
    # Summed over the session's error runs of this model; NULL while it has none.
    Column("recovered", Integer),
    Column("followed", Integer),
    Index("ix_stats_session_totals_errors", "model", "errors", "calls"),
    Index("ix_stats_session_totals_recovery", "model", "recovered", "followed"),
)

stats_latency_totals = Table(
    "stats_latency_totals",
    metadata,
    Column("model", String(256), primary_key=True),
    *_latency_bins(),
)
__all__ += ["stats_latency_totals", "stats_session_totals"]

# Project keys (migration 0018, proxy/keys/): what a key binds a client to (its project root, tool profile and
# policy), kept by the SHA-256 of the key, never the key. `prefix` is the key's first characters, for people to
# tell keys apart. `last_used_at` is written about once a minute per key and process, not per request.
project_keys = Table(
    "project_keys",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("key_hash", String(64), nullable=False),
    Column("prefix", String(16), nullable=False),
    Column("label", String(128)),
    Column("root", String(1024), nullable=False),
    Column("client", String(64)),
    Column("policy", String(128)),  # the `name` of the policy the key's requests are judged by; NULL: the served one
    Column("created_at", Float, nullable=False),
    Column("last_used_at", Float),
    Column("revoked_at", Float),
    UniqueConstraint("key_hash", name="uq_project_keys_key_hash"),
)
__all__ += ["project_keys"]


# -- secrets stopped by content (migration 0019) ------------------------------------------------------------
# What the request-side redaction replaced (proxy/enforce/secrets.py): one row per tool call (or inlined file) and
# detection rule of a session, written once, by the first request that carried it (a conversation re-sends its
# tool results with every request: the later ones find the row there). Never the secret, nor a hash of it.
secret_redactions = Table(
    "secret_redactions",
    metadata,
    Column("session_id", String(128), primary_key=True),
    Column("call_id", String(256), primary_key=True),  # the tool call whose result held it, or `<role>#<turn>`
    Column("type", String(128), primary_key=True),  # the detection rule's id
    Column("request_id", String(64), nullable=False),
    Column("model", String(256), nullable=False),
    Column("count", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_secret_redactions_model_created", "model", "created_at"),
)
__all__ += ["secret_redactions"]


# -- state any process may be asked about (migration 0020) ---------------------------------------------------
# What one serving process learnt that the next request of the conversation needs, wherever it is answered
# (`serve --workers N`, replicas behind a balancer): written before the answer that made it ends, read on a miss
# of the process's own cache.
# A Responses id the proxy handed out that the upstream must read as another (proxy/sessions/response_chains.py):
# a retried stream's, a blocked turn's, with the items the client got that the upstream does not hold.
response_chains = Table(
    "response_chains",
    metadata,
    Column("client_id", String(128), primary_key=True),
    Column("upstream_id", String(128), nullable=False),
    Column("items", Text, nullable=False),  # JSON list
    Column("created_at", Float, nullable=False),
    Index("ix_response_chains_created", "created_at"),
)
# The project root a session's client stated, each time it stated another (proxy/sessions/resolve.py): a request
# of the session that states none (a title, a subagent) is judged under the latest.
session_roots = Table(
    "session_roots",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("session_id", String(128), nullable=False),
    Column("root", String(1024), nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_session_roots_session", "session_id", "created_at"),
)
__all__ += ["response_chains", "session_roots"]
