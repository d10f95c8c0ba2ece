"""Judges the tool calls of one attempt and queues them, with their verdicts, for the store."""

from __future__ import annotations

import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.logs import get_logger
from proxy.metrics import TOOL_CALLS, UNGOVERNED_REQUESTS
from proxy.metrics_feed import LOOP_TRACKER
from proxy.policy import LoadedPolicy, judge_call
from proxy.policy.judge import shell_command
from proxy.policy.profiles import ToolSet
from proxy.policy.verdict import MALFORMED, Verdict
from proxy.record import RequestRecord
from proxy.store import tables
from proxy.store.writer import StoreWriter
from proxy.toolcalls import ToolCall

__all__ = ["JudgedCall", "judge_calls", "record_calls", "request_tools"]

log = get_logger("proxy.judging")

# Sessions already told that none of their tools is governed (bounded: oldest forgotten first).
_UNGOVERNED_TOLD: OrderedDict[str, None] = OrderedDict()
_UNGOVERNED_MEMORY = 10_000


@dataclass(slots=True)
class JudgedCall:
    call: ToolCall
    verdict: Verdict

    @property
    def allowed(self) -> bool:
        return self.verdict.allowed


def request_tools(policy: LoadedPolicy, record: RequestRecord, payload: Mapping[str, Any],
                  headers: Mapping[str, str], *, root_header: str | None = None) -> ToolSet | None:
    """The request's tool set: the profiles its offered tools choose (kept on the record), the project
    root its header names. A request offering tools none of which is governed is said once per session
    in the log, and counted every time."""
    try:
        tools = ToolSet.for_request(policy.policy, payload, headers, root_header=root_header)
    except Exception:  # the judge then applies every map that fits each call: stricter, never looser
        log.exception("judging.profile_selection_failed", request_id=record.id)
        return None
    record.profiles = ",".join(tools.profiles)[:256] or None
    if tools.offered and not tools.governed():
        UNGOVERNED_REQUESTS.labels(record.model).inc()
        session = record.session.id
        if session not in _UNGOVERNED_TOLD:
            _UNGOVERNED_TOLD[session] = None
            while len(_UNGOVERNED_TOLD) > _UNGOVERNED_MEMORY:
                _UNGOVERNED_TOLD.popitem(last=False)
            log.warning("judging.no_tool_governed", session=session, model=record.model,
                        tools=sorted(tools.offered)[:50], user_agent=tools.user_agent,
                        hint="add a profile for this client to the policy's `profiles:`")
    return tools


def judge_calls(policy: LoadedPolicy, calls: list[ToolCall], offered: set[str] | None, *,
                tools: ToolSet | None = None) -> list[JudgedCall]:
    judged: list[JudgedCall] = []
    for call in calls:
        if call.arguments is None:
            verdict = Verdict(MALFORMED, ("bad_arguments",), "bad_arguments")
        else:
            try:
                verdict = judge_call(policy.policy, call.name, call.arguments, offered_tools=offered, tools=tools)
            except Exception:  # judging must fail closed, whatever broke
                verdict = Verdict("reject", ("parse_error",), "parse_error")
        judged.append(JudgedCall(call, verdict))
    return judged


def _command(policy: LoadedPolicy, call: ToolCall, tools: ToolSet | None) -> str | None:
    if not isinstance(call.arguments, dict):
        return None
    try:
        return shell_command(policy.policy, call.name, call.arguments, tools=tools)
    except Exception:  # only for display: a call it cannot show is stored without it
        return None


def record_calls(writer: StoreWriter, record: RequestRecord, policy: LoadedPolicy, attempt: int,
                 judged: list[JudgedCall], *, delivered: bool, tools: ToolSet | None = None) -> None:
    now = time.time()
    for position, item in enumerate(judged):
        call, verdict = item.call, item.verdict
        call_id = uuid.uuid4().hex
        arguments_json: str | None = None
        if call.arguments is not None:
            arguments_json = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)
        primary = verdict.reasons[0] if verdict.reasons else None
        row: dict[str, Any] = {
            "id": call_id, "request_id": record.id, "session_id": record.session.id, "model": record.model,
            "route": record.route, "attempt": attempt, "call_index": position, "created_at": now + position * 1e-6,
            "tool_name": call.name[:256], "source": call.source, "arguments_raw": call.arguments_text,
            "arguments_json": arguments_json, "command": _command(policy, call, tools), "decision": verdict.decision,
            "primary_reason": primary, "reasons": ",".join(verdict.reasons), "shape": verdict.shape,
            "policy_name": policy.name, "policy_hash": policy.hash, "mode": policy.policy.mode,
            "delivered": delivered and verdict.allowed if policy.policy.mode == "enforce" else delivered,
        }
        writer.put(tables.tool_calls, row)
        for index, reason in enumerate(verdict.reasons):
            writer.put(tables.tool_call_reasons, {
                "tool_call_id": call_id, "position": index, "reason": reason, "model": record.model,
                "created_at": row["created_at"],
            })
        TOOL_CALLS.labels(record.model, verdict.decision, primary or "").inc()
        LOOP_TRACKER.observe(record.session.id, record.model, verdict, policy.policy.loop_min_attempts)
