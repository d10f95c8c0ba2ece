"""Judges the tool calls of one attempt: a pure function of the policy and the calls (rows: proxy.store.recorder)."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.policy import LoadedPolicy, judge_call
from proxy.policy.verdict import MALFORMED, Verdict
from proxy.toolcalls import ToolCall

__all__ = ["JudgedCall", "judge_calls"]


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
