"""Whole-text and whole-response extraction: the same scanners as the stream, fed at once."""

from __future__ import annotations

from typing import Any

from proxy.toolcalls.base import ExtractionResult
from proxy.toolcalls.registry import CONTENT_FORMATS, OPENAI
from proxy.toolcalls.scanner import message_text, scan_text
from proxy.toolcalls.schema import tool_schemas

__all__ = ["extract_from_message", "extract_from_response", "extract_from_text"]


def extract_from_text(text: str, tools: list[dict[str, Any]] | None = None) -> ExtractionResult:
    """Calls written in a model's text (Qwen3-Coder XML, Hermes JSON); `<think>` is never read."""
    return scan_text(text if isinstance(text, str) else "", CONTENT_FORMATS, tool_schemas(tools))


def extract_from_message(
    message: dict[str, Any], tools: list[dict[str, Any]] | None = None, *, scan_content: bool = True
) -> ExtractionResult:
    """An assistant message: calls found in `content` first (the order a stream delivers them),
    then its structured `tool_calls`. `reasoning` / `reasoning_content` are never read."""
    if not isinstance(message, dict):
        return ExtractionResult(content="")
    schemas = tool_schemas(tools)
    text = message_text(message)
    result = scan_text(text, CONTENT_FORMATS, schemas) if scan_content else ExtractionResult(content=text)
    structured = OPENAI.extract(message, schemas)
    result.tool_calls += structured.tool_calls
    result.malformed += structured.malformed
    return result


def extract_from_response(
    response: dict[str, Any], tools: list[dict[str, Any]] | None = None, *, scan_content: bool = True
) -> list[ExtractionResult]:
    """One result per choice, in the order the response lists them.

    A chat completion choice is read through its `message`; a legacy completion choice
    (`/v1/completions`) through its `text`.
    """
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list):
        return []
    results: list[ExtractionResult] = []
    for choice in choices:
        choice = choice if isinstance(choice, dict) else {}
        message = choice.get("message")
        if not isinstance(message, dict) and isinstance(choice.get("text"), str):
            message = {"content": choice["text"]}
        results.append(extract_from_message(message or {}, tools, scan_content=scan_content))
    return results
