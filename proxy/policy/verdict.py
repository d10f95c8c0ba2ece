"""The judgement of one tool call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ALLOW", "MALFORMED", "REJECT", "Decision", "Verdict"]

Decision = Literal["allow", "reject", "malformed"]
ALLOW: Decision = "allow"
REJECT: Decision = "reject"
MALFORMED: Decision = "malformed"


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
