"""What the proxy remembers of one client request, as plain data: the session it belongs to, the request
itself and the verdicts on its calls. The relays fill it in (proxy.enforce), the store turns it into rows
(proxy.store.recorder), the listeners of a finished request read it (proxy.services); none of them is
imported here."""

from __future__ import annotations

import time
import uuid
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from proxy import telemetry
from proxy.policy.judge import call_command
from proxy.policy.schema import Policy
from proxy.policy.tools.profiles import ToolSet
from proxy.policy.verdict import REPAIRED, Verdict
from proxy.toolcalls import ToolCall

__all__ = ["Digests", "JudgedCall", "RequestRecord", "SessionRef", "Usage", "shown_call"]


@dataclass(slots=True)
class Digests:
    """A conversation's lineage keys, hashed once per request (proxy/sessions/resolve.py): the digest of each
    prefix that may end in a turn the proxy delivered, and the running hash after the whole conversation, which
    its reply extends. The messages themselves are not kept: a request need not hold its parsed conversation
    while it streams."""

    keys: list[str]
    running: Any  # hashlib's sha256 object
    turns: int  # how many of the messages were hashed (instructions are not)
    # the id-free running hash (proxy/sessions/content_lineage.py), None where not computed
    free: Any = None
    # the namespace the keys are hashed in (a project key's), None without one
    namespace: str | None = None
    # The turns were hashed as their client sends them back (a client that rewrites the turns it was given,
    # proxy/sessions/rewritten.py): its reply is remembered so too.
    rewritten: bool = False
    # Keys its delivered reply reaches besides the conversation's own (a client that rewrites its history each
    # step: DSPy's trajectory, proxy/sessions/rewritten.py `history_keys`).
    also: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SessionRef:
    id: str
    source: str  # header | metadata (Claude Code's body) | lineage (previous_response_id included)
    is_new: bool
    # lineage only: the request's conversation as hashed when it was resolved (`remember` extends it)
    digests: Digests | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class JudgedCall:
    call: ToolCall
    verdict: Verdict
    _: KW_ONLY
    # When repaired: the arguments text and command the model wrote (`call` now holds the repaired form).
    original_arguments: str | None = None
    original_command: str | None = None
    original_object: dict[str, Any] | None = None
    # The feedback variant of the call's session (policy `feedback_variants`), None without an experiment.
    variant: str | None = None
    # Judged where no project root was known (no key, pin, header or statement): its feedback says how to bind one.
    unrooted: bool = False

    @property
    def allowed(self) -> bool:
        """May be delivered: allowed as written, or repaired into an allowed call."""
        return self.verdict.allowed or self.verdict.decision == REPAIRED

    @property
    def repaired(self) -> bool:
        return self.verdict.decision == REPAIRED


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
    # Secrets replaced in what went upstream (proxy/enforce/secrets.py): (call id, type) -> how many. Never the
    # secret, nor anything computed from it.
    redactions: dict[tuple[str, str], int] = field(default_factory=dict)
    # The rejected calls of the last attempt when the retry budget ran out: what the log line shows.
    blocked: list[dict[str, Any]] | None = None
    saved: bool = False
    journaled: bool = False  # its journal entry is queued (proxy.store.recorder)
    trace: Any = None  # its trace while tracing is on (proxy/tracing.py); never stored

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

    def note_redactions(self, counts: dict[tuple[str, str], int]) -> None:
        """The secrets this request's redaction replaced, per (call id, type); counted as events too."""
        self.redactions = dict(counts)
        by_type: dict[str, int] = {}
        for (_, kind), count in counts.items():
            by_type[kind] = by_type.get(kind, 0) + count
        for kind, count in sorted(by_type.items()):
            telemetry.emit(telemetry.SecretsRedacted(self.model, kind, count))

    def note_blocked(self, judged: list[JudgedCall], policy: Policy, tools: ToolSet | None = None) -> None:
        """The retry budget ran out on these verdicts: kept for the log and the error column."""
        self.blocked = [{"tool": item.call.name, "reasons": list(item.verdict.reasons),
                         "call": _shorten(shown_call(policy, item.call, tools))}
                        for item in judged if not item.allowed]

    def settle_outcome(self) -> None:
        # A turn whose budget ran out is `blocked`, however the transport ended; upstream and client
        # failures keep their own outcome.
        if self.budget_exhausted and self.outcome == "ok":
            self.outcome = "blocked"
            if self.error is None and self.blocked:
                self.error = "retry budget spent: " + "; ".join(
                    f"{b['tool']} {','.join(b['reasons'])}: {b['call']}" for b in self.blocked)[:1000]


def shown_call(policy: Policy, call: ToolCall, tools: ToolSet | None = None) -> str:
    """A call as a person reads it: the command it carries, else its tool and arguments."""
    command = call_command(policy, call.name, call.arguments, tools=tools)
    return command if command is not None else f"{call.name} {call.arguments_text}"
