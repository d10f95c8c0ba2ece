"""Judges the tool calls of one attempt and queues them, with their verdicts, for the store."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from proxy.metrics import TOOL_CALLS
from proxy.metrics_feed import LOOP_TRACKER
from proxy.policy import LoadedPolicy, judge_call
from proxy.policy.verdict import MALFORMED, Verdict
from proxy.record import RequestRecord
from proxy.store import tables
from proxy.store.writer import StoreWriter
from proxy.toolcalls import ToolCall

__all__ = ["JudgedCall", "judge_calls", "record_calls"]


@dataclass(slots=True)
class JudgedCall:
    call: ToolCall
    verdict: Verdict

    @property
    def allowed(self) -> bool:
        return self.verdict.allowed


def judge_calls(policy: LoadedPolicy, calls: list[ToolCall], offered: set[str] | None) -> list[JudgedCall]:
    judged: list[JudgedCall] = []
    for call in calls:
        if call.arguments is None:
            verdict = Verdict(MALFORMED, ("bad_arguments",), "bad_arguments")
        else:
            try:
                verdict = judge_call(policy.policy, call.name, call.arguments, offered_tools=offered)
            except Exception:  # judging must fail closed, whatever broke
                verdict = Verdict("reject", ("parse_error",), "parse_error")
        judged.append(JudgedCall(call, verdict))
    return judged


def _command(policy: LoadedPolicy, call: ToolCall) -> str | None:
    bash = policy.policy.bash
    if call.name in bash.tools and isinstance(call.arguments, dict):
        value = call.arguments.get(bash.command_argument)
        return value if isinstance(value, str) else None
    return None


def record_calls(writer: StoreWriter, record: RequestRecord, policy: LoadedPolicy, attempt: int,
                 judged: list[JudgedCall], *, delivered: bool) -> None:
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
            "arguments_json": arguments_json, "command": _command(policy, call), "decision": verdict.decision,
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
