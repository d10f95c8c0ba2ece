"""What the proxy remembers of one client request (its rows are built in proxy.store.recorder)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from proxy.sessions.resolve import SessionRef
from proxy.store.recorder import queue_request
from proxy.store.writer import StoreWriter

__all__ = ["RequestRecord", "Usage"]


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    seen: bool = False

    def add(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        self.seen = True
        self.prompt_tokens += _int(usage.get("prompt_tokens"))
        self.completion_tokens += _int(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            self.cached_tokens += _int(details.get("cached_tokens"))


def _call_text(arguments: Any) -> str:
    if isinstance(arguments, dict) and isinstance(arguments.get("command"), str):
        return arguments["command"]
    return json.dumps(arguments, ensure_ascii=False)


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(kw_only=True, slots=True)
class RequestRecord:
    session: SessionRef
    model: str
    route: str
    upstream: str
    stream: bool
    concurrency: int
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started_at: float = field(default_factory=time.time)
    started_mono: float = field(default_factory=time.perf_counter)
    ttfb_ms: float | None = None
    ttft_ms: float | None = None
    duration_ms: float | None = None
    status: int | None = None
    outcome: str = "ok"
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    attempts: int = 1
    budget_exhausted: bool = False
    policy_name: str | None = None
    policy_hash: str | None = None
    mode: str | None = None
    profiles: str | None = None  # the tool profiles chosen for the request's tools, comma-separated
    project_root: str | None = None  # the roots its absolute paths were judged under (pinned or learned)
    ungoverned_text: int = 0  # a text-acting client's turns whose actions passed unread or unjudged
    # The rejected calls of the last attempt when the retry budget ran out: what the log line shows.
    blocked: list[dict[str, Any]] | None = None
    saved: bool = False
    journaled: bool = False  # its journal entry is queued (proxy.store.recorder)

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started_mono) * 1000.0

    def mark_first_byte(self) -> None:
        if self.ttfb_ms is None:
            self.ttfb_ms = self.elapsed_ms()

    def mark_first_token(self) -> None:
        if self.ttft_ms is None:
            self.ttft_ms = self.elapsed_ms()

    def fail(self, outcome: str, error: str, status: int | None = None) -> None:
        self.outcome = outcome
        self.error = error
        if status is not None:
            self.status = status

    def note_blocked(self, judged: list[Any]) -> None:
        """The retry budget ran out on these verdicts (JudgedCall): kept for the log and the error column."""
        self.blocked = [{"tool": item.call.name, "reasons": list(item.verdict.reasons),
                         "call": _shorten(_call_text(item.call.arguments))}
                        for item in judged if not item.allowed]

    def settle_outcome(self) -> None:
        # A turn whose budget ran out is `blocked`, however the transport ended; upstream and client
        # failures keep their own outcome.
        if self.budget_exhausted and self.outcome == "ok":
            self.outcome = "blocked"
            if self.error is None and self.blocked:
                self.error = "retry budget spent: " + "; ".join(
                    f"{b['tool']} {','.join(b['reasons'])}: {b['call']}" for b in self.blocked)[:1000]

    def save(self, writer: StoreWriter) -> None:
        """Queue the session (first time) and the request row; `Services.finish` calls it as a request ends."""
        if self.saved:
            return
        self.saved = True
        self.settle_outcome()
        if self.duration_ms is None:
            self.duration_ms = self.elapsed_ms()
        queue_request(writer, self)
