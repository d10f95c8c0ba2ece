"""One client request as it crosses the proxy, whatever its route: what was asked, under which
policy, the upstream attempts made for it, and its end."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from proxy.enforce import turn_allowed
from proxy.errors import BadRequest, ProxyError, error_body
from proxy.judging import JudgedCall, judge_calls, record_calls
from proxy.logs import get_logger
from proxy.metrics import BUDGET_EXHAUSTED, REQUESTS, RETRIES
from proxy.policy import LoadedPolicy
from proxy.record import RequestRecord
from proxy.sse import SSEDecoder, SSEEvent
from proxy.state import ProxyState
from proxy.toolcalls import ToolCall
from proxy.upstream import response_headers

__all__ = ["BLOCKED", "DELIVER", "RETRY", "Exchange", "finish_exchange", "open_stream_attempt", "pick_policy",
           "request_attempt", "upstream_events"]

log = get_logger("proxy.exchange")

# What happens after an attempt whose calls were judged.
DELIVER, RETRY, BLOCKED = "deliver", "retry", "blocked"


@dataclass
class Exchange:
    """One client request: what was asked, under which policy, and what has happened so far."""

    state: ProxyState
    record: RequestRecord
    payload: dict[str, Any]
    original_body: bytes
    body_changed: bool
    headers: dict[str, str]
    policy: LoadedPolicy
    tools: list[dict[str, Any]] | None
    offered: set[str]
    client_wants_usage: bool
    extra_messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def enforce(self) -> bool:
        return self.policy.policy.mode == "enforce"

    @property
    def budget(self) -> int:
        return max(0, int(self.policy.policy.retry_budget))

    @property
    def scan_content(self) -> bool:
        # A request that offers no tools cannot run one; text that merely looks like a call is left alone.
        return bool(self.offered)

    def body(self) -> bytes:
        if not self.extra_messages and not self.body_changed:
            return self.original_body
        payload = dict(self.payload)
        if self.extra_messages:
            payload["messages"] = list(payload["messages"]) + self.extra_messages
        return json.dumps(payload, ensure_ascii=False).encode()

    def judge(self, calls: list[ToolCall]) -> list[JudgedCall]:
        return judge_calls(self.policy, calls, self.offered)

    def keep(self, attempt: int, judged: list[JudgedCall], *, delivered: bool) -> None:
        if log.is_enabled_for(logging.DEBUG):
            log.debug("attempt", request_id=self.record.id, attempt=attempt, delivered=delivered,
                      verdicts=[{"tool": j.call.name, **j.verdict.as_dict()} for j in judged])
        record_calls(self.state.writer, self.record, self.policy, attempt, judged, delivered=delivered)

    def settle(self, attempt: int, judged: list[JudgedCall]) -> str:
        """Records an attempt's verdicts and says what follows under the policy's mode and budget:
        DELIVER (observe mode, or every call allowed), RETRY (budget left) or BLOCKED (budget spent)."""
        if not self.enforce or turn_allowed(judged):
            self.keep(attempt, judged, delivered=True)
            return DELIVER
        self.keep(attempt, judged, delivered=False)
        if attempt > self.budget:
            self.record.budget_exhausted = True
            self.record.note_blocked(judged)
            BUDGET_EXHAUSTED.labels(self.record.model).inc()
            return BLOCKED
        RETRIES.labels(self.record.model).inc()
        return RETRY


def pick_policy(request: Request, state: ProxyState) -> LoadedPolicy:
    manager = state.policies
    wanted = request.headers.get("x-allowlist-policy")
    if wanted and state.settings.policy_header:
        found = manager.get(wanted)
        if found is None:
            raise BadRequest(f"x-allowlist-policy names no loaded policy: {wanted!r}", param="x-allowlist-policy")
        return found
    return manager.current()


def finish_exchange(ex: Exchange) -> None:
    """The request is over: counted out, recorded, logged (exactly once, whatever the route)."""
    record = ex.record
    ex.state.finish(record)
    REQUESTS.labels(record.model, record.route, str(record.status)).inc()
    log.info("request", request_id=record.id, session=record.session.id, model=record.model,
             route=record.route, stream=record.stream, status=record.status, outcome=record.outcome,
             error=record.error, blocked=record.blocked, attempts=record.attempts,
             ttfb_ms=_round(record.ttfb_ms), ttft_ms=_round(record.ttft_ms),
             duration_ms=_round(record.duration_ms), concurrency=record.concurrency)


async def request_attempt(ex: Exchange, path: str) -> httpx.Response | Response:
    """One whole upstream attempt: the upstream's 200 response, or the answer for the client when the
    upstream refused (its error body and status, passed on as they are)."""
    record = ex.record
    try:
        response = await ex.state.upstream.request("POST", path, headers=ex.headers, content=ex.body())
    except ProxyError as exc:
        record.fail("upstream_error", exc.message, exc.status_code)
        raise
    record.mark_first_byte()
    record.status = response.status_code
    if response.status_code != 200:
        record.fail("upstream_error", response.text[:1000])
        return Response(response.content, status_code=response.status_code,
                        headers=response_headers(response.headers))
    return response


async def open_stream_attempt(ex: Exchange, path: str) -> httpx.Response | Response:
    """The first attempt of a streamed exchange, opened: the streaming 200 response (the caller closes
    it), or the finished exchange's answer for the client when the upstream refused."""
    record = ex.record
    try:
        response = await ex.state.upstream.open_stream("POST", path, headers=ex.headers, content=ex.body())
    except ProxyError as exc:
        record.fail("upstream_error", exc.message, exc.status_code)
        finish_exchange(ex)
        raise
    record.status = response.status_code
    if response.status_code == 200:
        return response
    try:
        content = await response.aread()
    except Exception as exc:  # the error body itself broke off
        content = json.dumps(error_body(f"upstream failed: {exc}", "upstream_error")).encode()
    finally:
        await response.aclose()
    record.fail("upstream_error", content.decode("utf-8", "replace")[:1000])
    finish_exchange(ex)
    return Response(content, status_code=response.status_code, headers=response_headers(response.headers))


async def upstream_events(ex: Exchange, response: httpx.Response) -> AsyncIterator[SSEEvent]:
    """The events of a streaming upstream response as they arrive, whatever the chunk boundaries.

    Raises ProxyError when the upstream breaks off. Use under `contextlib.aclosing` when leaving early.
    """
    decoder = SSEDecoder()
    with ex.state.upstream.errors_translated():
        async for chunk in response.aiter_raw():
            ex.record.mark_first_byte()
            for event in decoder.feed(chunk):
                yield event
    for event in decoder.close():
        yield event


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
