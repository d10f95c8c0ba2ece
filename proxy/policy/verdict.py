"""The judgement of one tool call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ALLOW", "MALFORMED", "REJECT", "REPAIRED", "Decision", "Verdict"]

Decision = Literal["allow", "reject", "malformed", "repaired"]
ALLOW: Decision = "allow"
REJECT: Decision = "reject"
MALFORMED: Decision = "malformed"
# A rejected call delivered in its repaired form under the policy's opt-in `repair:` list (repair.py); it
# keeps the rejection's reasons and shape and counts as an error.
REPAIRED: Decision = "repaired"


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: Decision
    reasons: tuple[str, ...] = ()
    shape: str | None = None

    @property
    def allowed(self) -> bool:
        return self.decision == ALLOW

    def as_dict(self) -> dict[str, object]:
        return {"decision": self.decision, "reasons": list(self.reasons), "shape": self.shape}
