"""Whole-text and whole-response extraction: the same scanners as the stream, fed at once."""

from __future__ import annotations

from typing import Any

from proxy.toolcalls.base import ExtractionResult
from proxy.toolcalls.families import DEFAULT_RULES, XmlRules
from proxy.toolcalls.registry import content_formats, structured_format
from proxy.toolcalls.scanner import message_text, scan_text
from proxy.toolcalls.schema import tool_schemas

__all__ = ["extract_from_message", "extract_from_response", "extract_from_text"]


def extract_from_text(
    text: str, tools: list[dict[str, Any]] | None = None, *, rules: XmlRules | None = None
) -> ExtractionResult:
    """Calls written in a model's text (the registered content formats); `<think>` is never read.

    XML is read as `rules` say (default: vLLM 0.19 `qwen3_coder`). This is the whole-response
    path: where the family strips a whole response's content when tools are called (0.24+), so
    does this; a stream's content is never stripped (vLLM streams it as it comes)."""
    rules = rules or DEFAULT_RULES
    result = scan_text(text if isinstance(text, str) else "", content_formats(rules), tool_schemas(tools))
    return _whole_content(result, rules)


def extract_from_message(
    message: dict[str, Any], tools: list[dict[str, Any]] | None = None, *, scan_content: bool = True,
    rules: XmlRules | None = None,
) -> ExtractionResult:
    """An assistant message: calls found in `content` first (the order a stream delivers them),
    then its structured `tool_calls`. `reasoning` / `reasoning_content` are never read."""
    if not isinstance(message, dict):
        return ExtractionResult(content="")
    rules = rules or DEFAULT_RULES
    schemas = tool_schemas(tools)
    text = message_text(message)
    if not scan_content:
        result = ExtractionResult(content=text)
    else:
        result = _whole_content(scan_text(text, content_formats(rules), schemas), rules)
    structured = structured_format().extract(message, schemas)
    result.tool_calls += structured.tool_calls
    result.malformed += structured.malformed
    return result


def extract_from_response(
    response: dict[str, Any], tools: list[dict[str, Any]] | None = None, *, scan_content: bool = True,
    rules: XmlRules | None = None,
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
        results.append(extract_from_message(message or {}, tools, scan_content=scan_content, rules=rules))
    return results


def _whole_content(result: ExtractionResult, rules: XmlRules) -> ExtractionResult:
    if rules.strip_content_with_tools and result.tool_calls:
        result.content = result.content.strip()
    return result
