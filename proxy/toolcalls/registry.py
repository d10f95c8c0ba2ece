"""The tool-call formats by name: what `ChoiceStream` and the `extract_*` functions read.

`CONTENT_FORMATS` is the order in which content formats are asked to claim a `<tool_call>`
block: Hermes first (its mark, a JSON object, is the stricter), Qwen3-Coder last as the catch-all
that reports any other block as a malformed call.
"""

from __future__ import annotations

from proxy.toolcalls.base import ToolCallFormat
from proxy.toolcalls.hermes import HermesFormat
from proxy.toolcalls.openai import OpenAIFormat
from proxy.toolcalls.qwen3_coder import Qwen3CoderFormat
from proxy.toolcalls.scanner import ContentFormat

__all__ = ["CONTENT_FORMATS", "OPENAI", "REGISTRY"]

_QWEN3_CODER = Qwen3CoderFormat()
_HERMES = HermesFormat()
OPENAI = OpenAIFormat()

REGISTRY: dict[str, ToolCallFormat] = {fmt.name: fmt for fmt in (_QWEN3_CODER, _HERMES, OPENAI)}
CONTENT_FORMATS: tuple[ContentFormat, ...] = (_HERMES, _QWEN3_CODER)
