"""Hermes-style JSON calls in content (the Qwen2.5 / Qwen3 default chat template).

    <tool_call>
    {"name": "bash", "arguments": {"command": "ls"}}
    </tool_call>

As in vLLM's `hermes` parser the block runs to the first `</tool_call>` (or the end of the text)
and must be one JSON object; `arguments` may also be a JSON string holding an object. Where vLLM
gives up on the whole response (bad JSON, no name), only that call is reported, as malformed.
Beyond vLLM: `parameters` is read when `arguments` is absent (some fine-tunes write it), and a
call with neither has empty arguments; NaN and Infinity are not JSON and make a call malformed.
"""

from __future__ import annotations

from typing import Any, ClassVar

from proxy.toolcalls.base import Schemas, ToolCall, dumps, loads_strict
from proxy.toolcalls.scanner import TOOL_CALL_END, TOOL_CALL_START, ContentFormat

__all__ = ["HermesFormat"]

SOURCE = "hermes"


class HermesFormat(ContentFormat):
    name: ClassVar[str] = SOURCE
    # Asked before Qwen3-Coder's catch-all: its mark, a JSON object, is the stricter.
    priority: ClassVar[int] = 20

    def claims(self, body: str) -> bool:
        return body.lstrip().startswith("{")

    def parse_block(self, body: str, *, closed: bool, schemas: Schemas) -> list[ToolCall]:
        raw = TOOL_CALL_START + body + (TOOL_CALL_END if closed else "")
        try:
            call = loads_strict(body)
        except (ValueError, RecursionError) as exc:
            return [_malformed("", raw, f"tool call is not valid JSON: {exc}")]
        if not isinstance(call, dict):
            return [_malformed("", raw, "tool call is not a JSON object")]
        name = call.get("name")
        if not isinstance(name, str) or not name:
            return [_malformed("", raw, "tool call has no function name")]
        arguments: Any = call["arguments"] if "arguments" in call else call.get("parameters", {})
        if isinstance(arguments, str):
            try:
                arguments = loads_strict(arguments)
            except (ValueError, RecursionError) as exc:
                return [_malformed(name, raw, f"arguments string is not valid JSON: {exc}")]
        if not isinstance(arguments, dict):
            return [_malformed(name, raw, "arguments are not a JSON object")]
        try:
            arguments_text = dumps(arguments)
        except (ValueError, RecursionError):  # nested deeper than the encoder goes
            return [_malformed(name, raw, "arguments cannot be encoded as JSON")]
        return [
            ToolCall(
                name=name,
                arguments_text=arguments_text,
                arguments=arguments,
                source=SOURCE,
                raw=raw,
            )
        ]


def _malformed(name: str, raw: str, error: str) -> ToolCall:
    return ToolCall(name=name, arguments_text=raw, arguments=None, source=SOURCE, error=error, raw=raw)
