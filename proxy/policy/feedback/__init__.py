"""What the model is told after a refusal: the feedback text, the nearest allowed command, repairs, variants.

`messages` (the feedback template per capability and reason), `core` + `suggest` (the nearest allowed command),
`repair` (the opt-in `repair:` list: a rejected call delivered repaired), `variants` (feedback experiments).
"""

from __future__ import annotations

from .messages import format_feedback
from .repair import repair_call
from .suggest import Suggestion, suggest
from .variants import variant_for

__all__ = ["Suggestion", "format_feedback", "repair_call", "suggest", "variant_for"]
