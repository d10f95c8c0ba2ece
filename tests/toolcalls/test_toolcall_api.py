"""The names other parts of the proxy import, and the small helpers on ToolCall."""

from __future__ import annotations

import json
import re

import proxy.toolcalls as toolcalls
from proxy.toolcalls import ToolCall, extract_from_response, new_call_id, openai_call, openai_call_delta

from .toolcall_cases import LS, response, structured, text

PUBLIC = {
    "ToolCall", "ExtractionResult", "FORMATS", "extract_from_text", "extract_from_message",
    "extract_from_response", "ChoiceStream", "TextDelta", "CompletedCall", "new_call_id", "tool_schemas",
}  # fmt: skip


def test_public_names() -> None:
    assert set(toolcalls.__all__) >= PUBLIC
    for name in toolcalls.__all__:
        assert hasattr(toolcalls, name), name


def test_registry_names() -> None:
    assert list(toolcalls.FORMATS) == ["qwen3_coder", "hermes", "openai"]
    for name, fmt in toolcalls.FORMATS.items():
        assert fmt.name == name and isinstance(fmt, toolcalls.ToolCallFormat)


def test_new_call_id_is_vllm_shaped_and_fresh() -> None:
    ids = {new_call_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"chatcmpl-tool-[0-9a-f]{32}", i) for i in ids)


def test_call_as_openai_entry_and_as_one_delta() -> None:
    call = ToolCall(
        name="bash",
        arguments_text='{"command": "ls"}',
        arguments={"command": "ls"},
        source="qwen3_coder",
        id="chatcmpl-tool-x",
    )
    assert openai_call(call) == {
        "id": "chatcmpl-tool-x",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
    }
    delta = openai_call_delta(call, 2)
    assert delta["index"] == 2 and delta["id"] == "chatcmpl-tool-x" and delta["function"]["name"] == "bash"
    assert json.loads(delta["function"]["arguments"]) == {"command": "ls"}
    anonymous = ToolCall(name="x", arguments_text="{}", arguments={}, source="hermes")
    assert openai_call(anonymous)["id"] == openai_call_delta(anonymous, 0)["id"] == anonymous.id  # minted once


def test_extract_from_response_one_result_per_choice_in_order() -> None:
    body = response(text("a " + LS))
    body["choices"].append({"index": 1, "message": structured(("read", '{"filePath": "x"}'))})
    body["choices"].append("junk")
    first, second, third = extract_from_response(body)
    assert (first.content, [c.name for c in first.tool_calls]) == ("a ", ["bash"])
    assert [c.source for c in second.tool_calls] == ["openai"]
    assert (third.content, third.tool_calls, third.malformed) == ("", [], [])
    assert extract_from_response({"error": {"message": "x"}}) == []


def test_message_content_as_text_parts_and_scan_switch() -> None:
    message = {"role": "assistant", "content": [{"type": "text", "text": "a "}, {"type": "text", "text": LS}]}
    result = toolcalls.extract_from_message(message)
    assert result.content == "a " and len(result.tool_calls) == 1
    off = toolcalls.extract_from_message(message, scan_content=False)
    assert off.content == "a " + LS and off.tool_calls == []
