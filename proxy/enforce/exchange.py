"""One client request as it crosses the proxy, whatever its route: what was asked, under which policy, and
what has happened so far; the verbs that judge, record and settle an attempt."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

import httpx
from starlette.requests import Request
from starlette.responses import Response

from proxy import telemetry
from proxy.enforce.actions import judge_output
from proxy.enforce.body_splice import splice_body
from proxy.enforce.feedback_turns import refusal_note, turn_allowed
from proxy.enforce.judging import request_tools
from proxy.enforce.retry_text import line_break
from proxy.enforce.text_clients import UNRECOGNISED, TextClient, judge_text, ungoverned_reasons
from proxy.enforce.tool_choice import demands_call
from proxy.errors import ClientGone, ProxyError, error_response
from proxy.keys import ProjectKey
from proxy.logs import get_logger
from proxy.policy import LoadedPolicy
from proxy.policy.tools.profiles import ToolSet
from proxy.record import JudgedCall, RequestRecord
from proxy.services import Services
from proxy.store.recorder import queue_calls, release_calls
from proxy.toolcalls import ToolCall
from proxy.toolcalls.families import XmlRules
from proxy.toolcalls.registry import TEXT_FORMATS
from proxy.toolcalls.text_actions import Stated
from proxy.upstream.client import response_headers

__all__ = ["Exchange", "Outcome", "edited_bytes"]


T = TypeVar("T")

log = get_logger("proxy.enforce.exchange")


class Outcome(StrEnum):
    """What happens after an attempt whose calls were judged."""

    DELIVER = "deliver"
    RETRY = "retry"
    BLOCKED = "blocked"


@dataclass(kw_only=True)
class Exchange:
    """One client request: what was asked, under which policy, and what has happened so far."""

    state: Services
    record: RequestRecord
    payload: dict[str, Any]
    original_body: bytes
    body_changed: bool
    headers: dict[str, str]
    policy: LoadedPolicy
    tools: list[dict[str, Any]] | None
    offered: set[str]
    client_wants_usage: bool
    # The payload member holding the conversation, left out of `payload` once the prelude read what it needed:
    # the body's bytes are the one copy kept while the answer streams, and a retry reads it again from them.
    history_key: str | None = None
    stated: str | None = None  # the project root the client's own request text states (sessions/project_root.py)
    key: ProjectKey | None = None  # the project key the request presents: its root, profile and policy win
    text_client: TextClient | None = None  # the text-acting client this request comes from (text_clients.py)
    extra_messages: list[dict[str, Any]] = field(default_factory=list)
    # The client's request, watched for a disconnect while an upstream attempt is awaited whole (no
    # response started yet); None where nobody watches (tests, the CLI).
    client: Request | None = None
    client_left: bool = False
    # The request's tool profiles and project root (proxy/policy/tools/profiles.py), chosen once per request.
    toolset: ToolSet | None = field(default=None, init=False)
    # The calls refused in the attempts before this one: a delivered turn after them carries `refusal_note`.
    refused: list[JudgedCall] = field(default_factory=list, init=False)
    # What the client's next request continues from (its lineage, a handed-out Responses id) was queued for a store
    # other processes read: the answer's end waits for its commit (`continuation_durable`).
    commit_before_end: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.key is not None:  # told, not guessed: no header or text of the request is read for a root
            self.toolset = request_tools(self.policy, self.record, self.payload, self.headers,
                                         bound_root=self.key.root, client=self.key.client)
        else:
            stated = self.state.sessions.project_root(self.record.session, self.stated)
            self.toolset = request_tools(self.policy, self.record, self.payload, self.headers,
                                         root_header=self.state.settings.policy.project_root_header,
                                         stated_root=stated)
        client = self.text_client
        if client is not None and client.sentinels and self.toolset is not None:
            self.toolset.exact = client.sentinels  # its protocol commands, in its structured shell calls too
        if client is None and not self.offered and not self._named_agent():
            self.text_client = UNRECOGNISED  # counted where its answer holds a block it may run

    async def continuation_durable(self) -> None:
        """Before the answer's last bytes: commit what the next request continues from, where another process may
        answer it (`serve --workers N`, replicas). The client sends its next request only once it holds the whole
        answer, so whichever process answers it finds the rows. A store that cannot commit now costs the
        continuation (a new session, as for a client that rewrote its conversation), never the answer."""
        if not self.commit_before_end:
            return
        self.commit_before_end = False
        try:
            await self.state.writer.commit(self.state.settings.store.release_timeout_seconds)
        except Exception as exc:  # StoreFailure, or whatever the store raised: logged, the answer goes on
            log.warning("sessions.continuation_not_committed", request_id=self.record.id, error=str(exc)[:300])

    @property
    def enforce(self) -> bool:
        return self.policy.policy.mode == "enforce"

    @property
    def budget(self) -> int:
        return max(0, int(self.policy.policy.retry_budget))

    @property
    def acts_on_text(self) -> bool:
        """The client runs actions written in the text: a turn's text is held until judged, as a call is."""
        return self.text_client is not None and bool(self.text_client.formats)

    def _named_agent(self) -> bool:
        """The User-Agent names a client a tool profile describes (its requests without tools, titles and the like,
        run nothing)."""
        tools = self.toolset
        agent = tools.user_agent if tools is not None else None
        if tools is None or not agent:
            return False
        return any(pattern.search(agent) for pattern in tools.table.user_agents.values())

    def judge_text(self, text: str, pieces: list[str] | None = None) -> list[JudgedCall]:
        """The verdicts of the actions a text-acting client would run from this assistant text (`pieces`: as the
        chunks it is delivered in); what it would run unjudged is counted
        (`allowlist_proxy_ungoverned_text_actions_total`) and logged."""
        client = self.text_client
        if client is None or not text:
            return []
        reasons = ungoverned_reasons(client, text)
        if reasons:
            telemetry.emit(telemetry.UngovernedText(self.record.model, client.name))
            self.record.ungoverned_text += 1
            (log.info if client is UNRECOGNISED else log.warning)(
                "text_actions.ungoverned", client=client.name, reasons=reasons, session=self.record.session.id)
        if not client.formats:
            return []
        return judge_text(self.policy, client, text, tools=self.toolset, session_id=self.record.session.id,
                          pieces=pieces)

    @property
    def demands_call(self) -> bool:
        """The request demands a tool call: a blocked turn ends in an error, not a text answer (tool_choice.py)."""
        return demands_call(self.payload)

    @property
    def scan_content(self) -> bool:
        # A request that offers no tools cannot run one; text that merely looks like a call is left alone.
        return bool(self.offered)

    @property
    def rules(self) -> XmlRules | None:
        """How raw XML in content is read: as the upstream's vLLM version family would."""
        return self.state.vllm.current() if self.state.vllm is not None else None

    def body(self) -> bytes:
        if not self.extra_messages and not self.body_changed:
            return self.original_body
        full = self.full_payload()
        return self.edited_body("messages", list(full["messages"]) if self.extra_messages else [], full)

    def full_payload(self) -> dict[str, Any]:
        """The request as parsed with the proxy's changes, its conversation read again from the bytes sent (a
        retry's work, not every answer's)."""
        if self.history_key is None or self.history_key in self.payload:
            return self.payload
        return {**json.loads(self.original_body), **self.payload}

    def edited_body(self, key: str, history: list[Any], payload: dict[str, Any] | None = None) -> bytes:
        """The bytes sent with the proxy's turns spliced in (proxy/enforce/body_splice.py): every message the
        client sent goes upstream byte for byte; a body that cannot be edited in place is re-encoded."""
        return edited_bytes(self.original_body, self.full_payload() if payload is None else payload, key, history,
                            self.extra_messages)

    def judge(self, calls: list[ToolCall]) -> list[JudgedCall]:
        # With the policy's opt-in `repair:`: every relay that judges here delivers the judged call objects
        # re-encoded (proxy/enforce/judging.py), never the upstream's bytes for a repaired call. Raw completions,
        # whose calls are the model's own text, judges without repair (proxy/dialects/completions.py).
        return judge_output(self.policy, calls, self.offered, tools=self.toolset,
                            session_id=self.record.session.id, repair=True)

    def error_response(self, exc: ProxyError) -> Response:
        """An error answer for the client in this route's shape (OpenAI's; the Messages API has its own)."""
        return error_response(exc)

    def broken_error_body(self, response: httpx.Response, exc: Exception) -> Response:
        """The answer when the upstream's error body itself broke off while read: its status, with an error
        body of the proxy's (the request on record as that error)."""
        content = json.dumps({"error": {"message": f"upstream failed: {exc}", "type": "upstream_error",
                                        "param": None, "code": None}}).encode()
        self.record.fail("upstream_error", content.decode("utf-8", "replace")[:1000])
        return Response(content, status_code=response.status_code, headers=response_headers(response.headers))

    def refuse(self, exc: ProxyError) -> Response:
        """The upstream's answer is not relayed: the client gets an error, the request is an upstream error."""
        self.record.fail("upstream_error", exc.message[:1000], exc.status_code)
        return self.error_response(exc)

    def keep(self, attempt: int, judged: list[JudgedCall], *, delivered: bool) -> None:
        if log.is_enabled_for(logging.DEBUG):
            log.debug("attempt", request_id=self.record.id, attempt=attempt, delivered=delivered,
                      verdicts=[{"tool": j.call.name, **j.verdict.as_dict()} for j in judged])
        """Queue an attempt's calls for the store without waiting (held back, or recorded after the fact)."""
        queue_calls(self.state.writer, self.record, self.policy, attempt, judged, delivered=delivered,
                    tools=self.toolset)
        self._count(judged)

    async def release(self, attempt: int, judged: list[JudgedCall]) -> None:
        """The release point: returns once the calls about to be delivered are on record (enforce mode), or
        raises StoreUnavailable (503) when they cannot be and `on_store_failure` is `refuse`."""
        settings = self.state.settings
        try:
            await release_calls(self.state.writer, self.record, self.policy, attempt, judged,
                                on_store_failure=settings.store.on_failure,
                                timeout=settings.store.release_timeout_seconds, tools=self.toolset)
        finally:
            self._count(judged)

    async def settle(self, attempt: int, judged: list[JudgedCall]) -> Outcome:
        """Records an attempt's verdicts and says what follows under the policy's mode and budget:
        DELIVER (observe mode, or every call allowed), RETRY (budget left) or BLOCKED (budget spent).

        DELIVER returns only once the calls are on record (audit before release, enforce mode); when the store
        cannot record them and `on_store_failure` is `refuse`, raises StoreUnavailable instead."""
        if not self.enforce or turn_allowed(judged):
            await self.release(attempt, judged)
            return Outcome.DELIVER
        self.keep(attempt, judged, delivered=False)
        self.refused += [item for item in judged if not item.allowed]
        if attempt > self.budget:
            self.record.budget_exhausted = True
            self.record.note_blocked(judged, self.policy.policy, self.toolset)
            telemetry.emit(telemetry.BudgetSpent(self.record.model))
            return Outcome.BLOCKED
        telemetry.emit(telemetry.AttemptRetried(self.record.model))
        return Outcome.RETRY

    def refusal_note(self, text: str = "") -> str:
        """The line a turn delivered after a refusal ends with (feedback_turns.py `refusal_note`), or "" where
        nothing was refused or `text` (what the client holds of the turn, the note's place) already carries it.

        A text-acting client reads its actions from the whole text: its note names the refused calls without
        quoting them, and goes out only where reading the text with it finds exactly the actions (and unreadable
        parts) found without it, so nothing the proxy adds is an action it did not judge."""
        note = refusal_note(self.policy, self.refused, quote=not self.acts_on_text) if self.refused else ""
        if not note or note in text:
            return ""
        client = self.text_client
        if client is not None and client.formats:
            for name in client.formats:
                found = _read(name, text, client.stated)
                # As a chat turn carries it, and as a client joins a turn's text blocks or items.
                if any(_read(name, joined, client.stated) != found
                       for joined in (text + line_break(text) + note, text + note)):
                    return ""
        return note

    def settle_truncated(self, attempt: int, judged: list[JudgedCall]) -> None:
        """A stream that ended without a finish (no finish_reason, or no [DONE] / completed event): an upstream
        error. The calls it completed are judged and recorded as not delivered; the relay sends the client an
        error event instead of them."""
        self.keep(attempt, judged, delivered=False)
        self.record.fail("upstream_error", "the upstream stream ended without a finish")

    def _count(self, judged: list[JudgedCall]) -> None:
        record, loop_min = self.record, self.policy.policy.loop_min_attempts
        for item in judged:
            verdict = item.verdict
            telemetry.emit(telemetry.CallJudged(record.model, record.session.id, verdict.decision,
                                                verdict.reasons[0] if verdict.reasons else "", verdict.is_error,
                                                verdict.loop_key, loop_min))

    async def unless_client_leaves(self, start: Callable[[], Awaitable[T]]) -> T:
        """Await `start()` (an upstream attempt) unless the client disconnects first: then the attempt is cancelled
        at once (httpx closes the upstream connection, so the server stops generating), the record says
        `client_disconnected` and ClientGone (499) is raised, so no retry starts either.

        The attempt runs in this task, at once; a watcher task cancels it when the disconnect arrives. Run as a
        task of its own (and after a turn to let a disconnect already known end the watcher first), it reached the
        upstream two turns of the event loop later, each behind every stream's chunks ready then."""
        if self.client is None:
            return await start()
        if not self.client_left:
            current = asyncio.current_task()
            watcher = asyncio.ensure_future(_disconnected(self.client))
            armed = [True]  # a callback already scheduled when the attempt ended must not cancel what follows
            cancelled = [False]

            def left(done: asyncio.Future[None]) -> None:
                if armed[0] and current is not None and not done.cancelled() and done.exception() is None:
                    cancelled[0] = True
                    current.cancel()

            watcher.add_done_callback(left)
            try:
                return await start()
            except asyncio.CancelledError:
                if not cancelled[0]:
                    raise  # cancelled by someone else
                if current is not None:
                    current.uncancel()  # the watcher's own cancel, answered here
            finally:
                armed[0] = False
                watcher.remove_done_callback(left)
                watcher.cancel()
            self.client_left = True
        self.record.fail("client_disconnected", "the client went away before the answer", 499)
        raise ClientGone("the client went away before the answer")


def _read(fmt: str, text: str, stated: Stated) -> tuple[list[tuple[str, str, str | None]], list[str]]:
    """The actions `text` holds as the client reads them (with what its request states), each as what it does:
    its name, arguments and error. Not its raw text: a client that takes the whole text as an action's source
    (DSPy's fields, Open Interpreter's blocks) would differ by the note itself."""
    found = TEXT_FORMATS[fmt].read(text, stated)
    return [(call.name, call.arguments_text, call.error) for call in found.calls], found.unreadable


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def edited_bytes(original: bytes, payload: dict[str, Any], key: str | None = None, history: list[Any] | None = None,
                 extra: list[Any] | None = None) -> bytes:
    """`original` with `payload`'s changed members and `extra` spliced onto its `key` array in place
    (proxy/enforce/body_splice.py); the whole payload re-encoded where that cannot be done."""
    spliced = splice_body(original, payload, key, history, extra)
    if spliced is not None:
        return spliced
    if extra and key is not None:
        payload = {**payload, key: list(history or []) + extra}
    return json.dumps(payload, ensure_ascii=False).encode()
