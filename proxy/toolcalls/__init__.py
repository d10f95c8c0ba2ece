"""Tool-call extraction: every call a model makes, however the upstream delivers it.

Formats (one module each, registered in `REGISTRY`): structured OpenAI `tool_calls` (`openai`),
Qwen3-Coder XML in content (`qwen3_coder`), Hermes JSON in content (`hermes`). See
docs/toolcalls.md for the grammar and where it follows or departs from vLLM's parsers.
"""

from __future__ import annotations

from proxy.toolcalls.base import (
    CompletedCall,
    Event,
    ExtractionResult,
    FormatStream,
    TextDelta,
    ToolCall,
    ToolCallFormat,
    new_call_id,
)
from proxy.toolcalls.extract import extract_from_message, extract_from_response, extract_from_text
from proxy.toolcalls.registry import REGISTRY
from proxy.toolcalls.schema import tool_schemas
from proxy.toolcalls.stream import ChoiceStream

__all__ = [
    "REGISTRY",
    "ChoiceStream",
    "CompletedCall",
    "Event",
    "ExtractionResult",
    "FormatStream",
    "TextDelta",
    "ToolCall",
    "ToolCallFormat",
    "extract_from_message",
    "extract_from_response",
    "extract_from_text",
    "new_call_id",
    "tool_schemas",
]
