"""Tool-call extraction: every call a model makes, however the upstream delivers it.

Formats (one module each, registered in `FORMATS`, which extraction dispatches through): structured
OpenAI `tool_calls` (`openai`), Qwen3-Coder XML in content (`qwen3_coder`), Hermes JSON in content
(`hermes`). See
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
from proxy.toolcalls.registry import FORMATS
from proxy.toolcalls.render import openai_call, openai_call_delta
from proxy.toolcalls.schema import tool_schemas
from proxy.toolcalls.stream import ChoiceStream

__all__ = [
    "FORMATS",
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
    "openai_call",
    "openai_call_delta",
    "tool_schemas",
]
