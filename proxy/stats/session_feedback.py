"""The feedback a session's rejected calls got, rebuilt for the session view: the store keeps each call's
verdict, policy hash and feedback variant, not the text, and the text follows from those. Rebuilt only
when the policy of that name still has the hash the call was judged under; otherwise `feedback` stays None
and `feedback_note` says why."""

from __future__ import annotations

import json
from typing import Any

from proxy.policy import PolicyManager, judge_call
from proxy.policy.feedback.messages import format_feedback
from proxy.policy.verdict import is_error

__all__ = ["add_feedback"]


def add_feedback(detail: dict[str, Any], policies: PolicyManager) -> dict[str, Any]:
    for call in detail["calls"]:
        call["feedback"] = None
        if not is_error(call["decision"]):
            continue
        loaded = policies.get(call["policy_name"] or "")
        if loaded is None or loaded.hash != call.get("policy_hash"):
            call["feedback_note"] = "the policy it was judged under has changed since: feedback not rebuilt"
            continue
        if loaded.mode != "enforce":
            call["feedback_note"] = "observe mode: the model was told nothing"
            continue
        try:
            arguments = json.loads(call["arguments"]) if call["arguments"] else None
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            arguments = None
        verdict = judge_call(loaded.policy, call["tool_name"], arguments)
        call["feedback"] = format_feedback(loaded.policy, verdict, tool=call["tool_name"], arguments=arguments,
                                           variant=call["feedback_variant"], unrooted=not detail.get("project_root"))
    return detail
