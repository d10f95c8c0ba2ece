"""Metrics that need more than one increment at a call site: loops, first-token latency, tokens, request
latency by outcome, blocked turns.

Loops follow `proxy.store.queries`' definition so `/metrics` and `/stats/models` count the same thing: a
run is consecutive error calls (`Verdict.is_error`) of one session and one model with the same
`Verdict.loop_key`; it becomes a loop when it reaches the policy's `loop_min_attempts`, and is counted
once, at that moment. The tracker keeps one small entry per
recently active session, so it costs a dictionary update per judged call.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from proxy.policy.verdict import Verdict
from proxy.record import RequestRecord
from proxy.stats.prometheus import BLOCKED_TURNS, FIRST_TOKEN_LATENCY, LOOPS, REQUEST_LATENCY, TOKENS

__all__ = ["LOOP_TRACKER", "LoopTracker", "observe_request"]

@dataclass(slots=True)
class _Run:
    model: str
    shape: str | None  # None: the session's last call was allowed
    length: int


class LoopTracker:
    def __init__(self, max_sessions: int = 50_000) -> None:
        # Least recently active sessions are forgotten first; a session idle that long has no run worth counting.
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._max = max_sessions

    def observe(self, session: str, model: str, verdict: Verdict, loop_min_attempts: int) -> bool:
        """Feed one judged call, in session order; True when it made its run a loop."""
        run = self._runs.get(session)
        if not verdict.is_error:
            self._remember(session, _Run(model, None, 0))
            return False
        shape = verdict.loop_key
        if run is not None and run.shape == shape and run.model == model:
            run.length += 1
            self._runs.move_to_end(session)
        else:
            run = _Run(model, shape, 1)
            self._remember(session, run)
        if run.length == max(1, loop_min_attempts):
            LOOPS.labels(model).inc()
            return True
        return False

    def _remember(self, session: str, run: _Run) -> None:
        self._runs[session] = run
        self._runs.move_to_end(session)
        while len(self._runs) > self._max:
            self._runs.popitem(last=False)


LOOP_TRACKER = LoopTracker()


def observe_request(record: RequestRecord) -> None:
    """Services listener: the client request's latency by outcome, first-token latency of streamed requests,
    blocked turns, and the tokens the upstream counted."""
    REQUEST_LATENCY.labels(record.model, record.outcome).observe((record.duration_ms or 0) / 1000.0)
    if record.outcome == "blocked":
        BLOCKED_TURNS.labels(record.model).inc()
    if record.stream and record.ttft_ms is not None and record.outcome == "ok":
        FIRST_TOKEN_LATENCY.labels(record.model).observe(record.ttft_ms / 1000.0)
    if record.usage.seen:
        TOKENS.labels(record.model, "prompt").inc(record.usage.prompt_tokens)
        TOKENS.labels(record.model, "completion").inc(record.usage.completion_tokens)
