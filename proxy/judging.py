"""Judges the tool calls of one attempt: a pure function of the policy and the calls (rows: proxy.store.recorder)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proxy.logs import get_logger
from proxy.metrics import UNGOVERNED_REQUESTS
from proxy.policy import LoadedPolicy, judge_call
from proxy.policy.profiles import ToolSet
from proxy.policy.verdict import MALFORMED, Verdict
from proxy.toolcalls import ToolCall

if TYPE_CHECKING:
    from proxy.record import RequestRecord

__all__ = ["JudgedCall", "judge_calls", "request_tools"]

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

