"""Judges the tool calls of one attempt: a pure function of the policy, the request's tool profiles and the
calls (their rows are built by proxy.store.recorder).

Under a policy's opt-in `repair:` list a rejected call whose repaired form is allowed is repaired here,
in place: the `ToolCall` object itself then carries the repaired arguments (and `arguments_text`), its
verdict is `repaired`, and `JudgedCall.allowed` says it may be delivered. A relay therefore delivers
repaired calls simply by delivering the call objects it judged, re-encoded: it must never forward the
upstream's own bytes for a turn with a repaired call (`apply_repairs` patches a whole chat message).
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from proxy import telemetry, tracing
from proxy.logs import get_logger
from proxy.policy import LoadedPolicy, judge_call
from proxy.policy.feedback.repair import repair_call
from proxy.policy.feedback.variants import variant_for
from proxy.policy.judge import call_command
from proxy.policy.roots import root_problem
from proxy.policy.tools.profiles import ToolSet, profile_table
from proxy.policy.verdict import REJECT, REPAIRED, Verdict
from proxy.record import JudgedCall, RequestRecord
from proxy.toolcalls import ToolCall
from proxy.toolcalls.openai import structured_call

__all__ = ["apply_repairs", "judge_calls", "judge_offline", "request_tools"]

log = get_logger("proxy.enforce.judging")

# Sessions already told that none of their tools is governed (bounded: oldest forgotten first).
_UNGOVERNED_TOLD: OrderedDict[str, None] = OrderedDict()
_UNGOVERNED_MEMORY = 10_000


def request_tools(policy: LoadedPolicy, record: RequestRecord, payload: Mapping[str, Any],
                  headers: Mapping[str, str], *, root_header: str | None = None,
                  stated_root: str | None = None, bound_root: str | None = None,
                  client: str | None = None) -> ToolSet | None:
    """The request's tool set: the profiles its offered tools choose (kept on the record), the project
    root its header names (or its project key binds, with the key's client profile: `bound_root`,
    `client`). A request offering tools none of which is governed is said once per session
    in the log, and counted every time."""
    try:
        tools = ToolSet.for_request(policy.policy, payload, headers, root_header=root_header, stated_root=stated_root,
                                    bound_root=bound_root, client=client)
    except Exception:  # the judge then applies every map that fits each call: stricter, never looser
        log.exception("judging.profile_selection_failed", request_id=record.id)
        return None
    record.profiles = ",".join(tools.profiles)[:256] or None
    record.project_root = ",".join(tools.roots)[:1024] or None
    if tools.offered and not tools.governed():
        telemetry.emit(telemetry.UngovernedRequest(record.model))
        session = record.session.id
        if session not in _UNGOVERNED_TOLD:
            _UNGOVERNED_TOLD[session] = None
            while len(_UNGOVERNED_TOLD) > _UNGOVERNED_MEMORY:
                _UNGOVERNED_TOLD.popitem(last=False)
            log.warning("judging.no_tool_governed", session=session, model=record.model,
                        tools=sorted(tools.offered)[:50], user_agent=tools.user_agent,
                        hint="add a profile for this client to the policy's `profiles:`")
    return tools


def _repair(policy: LoadedPolicy, item: JudgedCall, tools: ToolSet | None, offered: set[str] | None) -> None:
    """Repairs a rejected call in place when the policy's `repair:` list allows it (enforce mode only): any
    shell tool the request's profiles map, the command written back in that tool's argument shape."""
    call = item.call
    try:
        fix = repair_call(policy.policy, call.name, call.arguments, tools=tools, offered=offered)
    except Exception:  # a repair that breaks is no repair: the rejection stands
        fix = None
    if fix is None:
        return
    item.original_arguments = call.arguments_text
    item.original_command = call_command(policy.policy, call.name, call.arguments, tools=tools)
    item.original_object = call.arguments
    call.arguments = fix.arguments
    call.arguments_text = json.dumps(fix.arguments, ensure_ascii=False)
    item.verdict = Verdict(REPAIRED, item.verdict.reasons, item.verdict.shape)


def judge_calls(policy: LoadedPolicy, calls: list[ToolCall], offered: set[str] | None, *,
                tools: ToolSet | None = None, session_id: str | None = None,
                repair: bool = True) -> list[JudgedCall]:
    """The verdicts of one attempt's calls; `repair=False` for a relay that cannot deliver repaired calls."""
    judged: list[JudgedCall] = []
    variant = variant_for(policy.policy, session_id)
    repairs = repair and bool(policy.policy.repair) and policy.policy.mode == "enforce"
    traced = tracing.on()
    unrooted = not (tools.roots if tools is not None else policy.policy.paths.project_root)
    for call in calls:
        started = time.time_ns() if traced else 0
        verdict = judge_call(policy.policy, call.name, call.arguments, offered_tools=offered, tools=tools)
        item = JudgedCall(call, verdict, variant=variant, unrooted=unrooted)
        if repairs and verdict.decision == REJECT:
            _repair(policy, item, tools, offered)
        if traced:
            tracing.judged(call, item.verdict, started)
        judged.append(item)
    return judged


def judge_offline(policy: LoadedPolicy, tool: str, arguments: str | dict[str, Any] | None, *,
                  roots: tuple[str, ...] = ()) -> JudgedCall:
    """One call judged away from any request (`allowlist-proxy check`, `allowlist-proxy recheck`) exactly as the
    proxy judges it: the arguments read as the proxy reads a function call's (a strict JSON object, else
    malformed), then `judge_calls` with no offered tools known and no repair. `roots`: the project roots the call
    was judged under besides the policy's (recorded with its request), each taken only where `root_problem`
    takes it."""
    call = structured_call(name=tool, arguments=arguments, call_id=None, index=0)
    kept = tuple(root for root in roots if root_problem(root) is None)
    tools = ToolSet(table=profile_table(policy.policy), extra_roots=kept) if kept else None
    (judged,) = judge_calls(policy, [call], None, tools=tools, repair=False)
    return judged


def apply_repairs(message: dict[str, Any], judged: list[JudgedCall]) -> bool:
    """Writes the repaired calls' arguments into a chat message's structured `tool_calls` (matched by id,
    else by the upstream's tool index); returns whether anything changed. Calls converted from content are
    encoded from the call objects themselves, so they need nothing here."""
    entries = [e for e in message.get("tool_calls") or [] if isinstance(e, dict)]
    changed = False
    for item in judged:
        if not item.repaired or not item.call.structured:
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

