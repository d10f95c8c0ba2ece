"""The judgement of one tool call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ALLOW",
    "DECISIONS",
    "ERROR_DECISIONS",
    "MALFORMED",
    "REJECT",
    "REPAIRED",
    "Decision",
    "Verdict",
    "is_error",
    "loop_key",
]

Decision = Literal["allow", "reject", "malformed", "repaired"]
ALLOW: Decision = "allow"
REJECT: Decision = "reject"
MALFORMED: Decision = "malformed"
# A rejected call delivered in its repaired form under the policy's opt-in `repair:` list (repair.py); it
# keeps the rejection's reasons and shape and counts as an error.
REPAIRED: Decision = "repaired"
DECISIONS: tuple[Decision, ...] = (ALLOW, REJECT, MALFORMED, REPAIRED)
# The decisions that count as errors (DESIGN.md "Error rate"): a repaired call was still a broken rule.
# `proxy.store.verdict_sql` is the SQL twin of these definitions; a test keeps the two in agreement.
ERROR_DECISIONS: tuple[Decision, ...] = (REJECT, MALFORMED, REPAIRED)


def is_error(decision: str) -> bool:
    """Whether a decision (a Verdict's, or a stored row's) counts as an error."""
    return decision in ERROR_DECISIONS


def loop_key(shape: str | None, primary_reason: str | None, decision: str) -> str:
    """The key a run of error calls shares (with the model): the shape, else the primary reason, else the
    decision, so a rejection explained without a shape still groups with its own kind. The first that is
    not None, like SQL's COALESCE over the stored columns."""
    if shape is not None:
        return shape
    return primary_reason if primary_reason is not None else decision


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: Decision
    reasons: tuple[str, ...] = ()
    shape: str | None = None

    @property
    def allowed(self) -> bool:
        return self.decision == ALLOW

    @property
    def is_error(self) -> bool:
        return is_error(self.decision)

    @property
    def loop_key(self) -> str:
        # The stored row's primary reason is the first reason (proxy.store.recorder).
        return loop_key(self.shape, self.reasons[0] if self.reasons else None, self.decision)

    def as_dict(self) -> dict[str, object]:
        return {"decision": self.decision, "reasons": list(self.reasons), "shape": self.shape}
