"""Judges the tool calls of one attempt and queues them, with their verdicts, for the store.

Under a policy's opt-in `repair:` list a rejected call whose repaired form is allowed is repaired here,
in place: the `ToolCall` object itself then carries the repaired arguments (and `arguments_text`), its
verdict is `repaired`, and `JudgedCall.allowed` says it may be delivered. A relay therefore delivers
repaired calls simply by delivering the call objects it judged, re-encoded: it must never forward the
upstream's own bytes for a turn with a repaired call (`apply_repairs` patches a whole chat message).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from proxy.metrics import TOOL_CALLS
from proxy.metrics_feed import LOOP_TRACKER
from proxy.policy import LoadedPolicy, judge_call
from proxy.policy.repair import repair_call
from proxy.policy.variants import variant_for
from proxy.policy.verdict import MALFORMED, REJECT, REPAIRED, Verdict
from proxy.record import RequestRecord
from proxy.store import tables
from proxy.store.writer import StoreWriter
from proxy.toolcalls import ToolCall

__all__ = ["JudgedCall", "apply_repairs", "judge_calls", "record_calls"]


@dataclass(slots=True)
class JudgedCall:
    call: ToolCall
    verdict: Verdict
    # When repaired: the arguments text and command the model wrote (`call` now holds the repaired form).
    original_arguments: str | None = None
    original_command: str | None = None
    original_object: dict[str, Any] | None = None
    # The feedback variant of the call's session (policy `feedback_variants`), None without an experiment.
    variant: str | None = None

    @property
    def allowed(self) -> bool:
        """May be delivered: allowed as written, or repaired into an allowed call."""
        return self.verdict.allowed or self.verdict.decision == REPAIRED

    @property
    def repaired(self) -> bool:
        return self.verdict.decision == REPAIRED


def _repair(policy: LoadedPolicy, item: JudgedCall) -> None:
    """Repairs a rejected call in place when the policy's `repair:` list allows it (enforce mode only)."""
    call = item.call
    try:
        fix = repair_call(policy.policy, call.name, call.arguments)
    except Exception:  # a repair that breaks is no repair: the rejection stands
        fix = None
    if fix is None:
        return
    item.original_arguments = call.arguments_text
    item.original_command = _command(policy, call)
    item.original_object = call.arguments
    call.arguments = fix.arguments
    call.arguments_text = json.dumps(fix.arguments, ensure_ascii=False)
    item.verdict = Verdict(REPAIRED, item.verdict.reasons, item.verdict.shape)


def judge_calls(policy: LoadedPolicy, calls: list[ToolCall], offered: set[str] | None, *,
                session_id: str | None = None, repair: bool = True) -> list[JudgedCall]:
    """The verdicts of one attempt's calls; `repair=False` for a relay that cannot deliver repaired calls."""
    judged: list[JudgedCall] = []
    variant = variant_for(policy.policy, session_id)
    repairs = repair and bool(policy.policy.repair) and policy.policy.mode == "enforce"
    for call in calls:
        if call.arguments is None:
            verdict = Verdict(MALFORMED, ("bad_arguments",), "bad_arguments")
        else:
            try:
                verdict = judge_call(policy.policy, call.name, call.arguments, offered_tools=offered)
            except Exception:  # judging must fail closed, whatever broke
                verdict = Verdict("reject", ("parse_error",), "parse_error")
        item = JudgedCall(call, verdict, variant=variant)
        if repairs and verdict.decision == REJECT:
            _repair(policy, item)
        judged.append(item)
    return judged


def apply_repairs(message: dict[str, Any], judged: list[JudgedCall]) -> bool:
    """Writes the repaired calls' arguments into a chat message's structured `tool_calls` (matched by id,
    else by the upstream's tool index); returns whether anything changed. Calls converted from content are
    encoded from the call objects themselves, so they need nothing here."""
    entries = [e for e in message.get("tool_calls") or [] if isinstance(e, dict)]
    changed = False
    for item in judged:
        if not item.repaired or item.call.source != "openai":
            continue
        call = item.call
        found = next((e for e in entries if call.id and e.get("id") == call.id), None)
        if found is None and call.id is None and 0 <= call.index < len(entries):
            found = entries[call.index]
        function = found.get("function") if found is not None else None
        if isinstance(function, dict):
            function["arguments"] = call.arguments_text
            changed = True
    return changed


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
        written = item.original_object if item.repaired else call.arguments
        if written is not None:
            arguments_json = json.dumps(written, ensure_ascii=False, sort_keys=True)
        primary = verdict.reasons[0] if verdict.reasons else None
        arguments_raw = item.original_arguments if item.repaired else call.arguments_text
        row: dict[str, Any] = {
            "id": call_id, "request_id": record.id, "session_id": record.session.id, "model": record.model,
            "route": record.route, "attempt": attempt, "call_index": position, "created_at": now + position * 1e-6,
            "tool_name": call.name[:256], "source": call.source, "arguments_raw": arguments_raw,
            "arguments_json": arguments_json, "decision": verdict.decision,
            # What the model wrote; for a repaired call also what was delivered instead.
            "command": item.original_command if item.repaired else _command(policy, call),
            "repaired_command": _command(policy, call) if item.repaired else None,
            "feedback_variant": item.variant,
            "primary_reason": primary, "reasons": ",".join(verdict.reasons), "shape": verdict.shape,
            "policy_name": policy.name, "policy_hash": policy.hash, "mode": policy.policy.mode,
            "delivered": delivered and item.allowed if policy.policy.mode == "enforce" else delivered,
        }
        writer.put(tables.tool_calls, row)
        for index, reason in enumerate(verdict.reasons):
            writer.put(tables.tool_call_reasons, {
                "tool_call_id": call_id, "position": index, "reason": reason, "model": record.model,
                "created_at": row["created_at"],
            })
        TOOL_CALLS.labels(record.model, verdict.decision, primary or "").inc()
        LOOP_TRACKER.observe(record.session.id, record.model, verdict, policy.policy.loop_min_attempts)
