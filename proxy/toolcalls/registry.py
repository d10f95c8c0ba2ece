"""The tool-call formats by name: what `ChoiceStream` and the `extract_*` functions read.

`CONTENT_FORMATS` is the order in which content formats are asked to claim a `<tool_call>`
block: Hermes first (its mark, a JSON object, is the stricter), Qwen3-Coder last as the catch-all
that reports any other block as a malformed call.
"""

from __future__ import annotations

import functools

from proxy.toolcalls.base import ToolCallFormat
from proxy.toolcalls.families import DEFAULT_RULES, XmlRules
from proxy.toolcalls.hermes import HermesFormat
from proxy.toolcalls.openai import OpenAIFormat
from proxy.toolcalls.qwen3_coder import Qwen3CoderFormat
from proxy.toolcalls.scanner import ContentFormat

__all__ = ["CONTENT_FORMATS", "OPENAI", "REGISTRY", "content_formats"]

_HERMES = HermesFormat()
OPENAI = OpenAIFormat()


@functools.cache  # one tuple per rules object: a handful of families
def content_formats(rules: XmlRules = DEFAULT_RULES) -> tuple[ContentFormat, ...]:
    """The content formats in claiming order, with Qwen3-Coder XML read by `rules`."""
    return (_HERMES, Qwen3CoderFormat(rules))


CONTENT_FORMATS: tuple[ContentFormat, ...] = content_formats(DEFAULT_RULES)
REGISTRY: dict[str, ToolCallFormat] = {fmt.name: fmt for fmt in (CONTENT_FORMATS[1], _HERMES, OPENAI)}
