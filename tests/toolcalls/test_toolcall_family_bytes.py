"""The scripted upstream speaks each vLLM family's exact stream bytes, and the proxy relays every
family's structured tool calls: the calls the client assembles are the calls vLLM streamed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from tests.conftest import MODEL, RunningProxy, chat, sse_json

from .toolcall_cases import OPENCODE_TOOLS

ALLOWED = {"command": 'uv run scripts/search.py "café ✓"', "timeout": 30}
TARGETS = [(family, parser) for family in ("0.19", "0.23", "0.24", "0.27", "0.34")
           for parser in ("qwen3_coder", "qwen3_xml")]




def stream_from(url: str, body: dict[str, Any]) -> bytes:
    with httpx.Client(timeout=30) as client:
        response = client.post(url + "/chat/completions", json=body)
    assert response.status_code == 200
    return response.content


def tool_fragments(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [tc for c in chunks for ch in c["choices"] for tc in ch["delta"].get("tool_calls") or []]


@pytest.mark.parametrize(("family", "parser"), TARGETS)
def test_each_family_streams_its_own_bytes(
    family: str, parser: str, family_upstream: Callable[..., ScriptedUpstream]
) -> None:
    upstream = family_upstream(family, parser, keep_alive=True)
    upstream.script(Reply(tool_calls=[("bash", ALLOWED)], arguments_chunk=5))
    raw = stream_from(upstream.url, chat(stream=True, stream_options={"include_usage": True}))
    assert "é".encode() in raw and b"\\u00e9" not in raw  # raw UTF-8, not \\u escapes
    assert (b": keep-alive\n\n" in raw) == (family == "0.34")
    chunks = sse_json(raw)
    assert "prompt_token_ids" in chunks[0] and ("prompt_text" in chunks[0]) == (family != "0.19")
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    choices = [ch for c in chunks for ch in c["choices"]]
    assert all(ch["token_ids"] is None for ch in choices)
    assert choices[-1]["finish_reason"] == "tool_calls" and "stop_reason" in choices[-1]
    assert "prompt_tokens_details" not in chunks[-1]["usage"]

    first, *rest = tool_fragments(chunks)
    regex_stream = family in ("0.19", "0.23") and parser == "qwen3_coder"
    assert re.fullmatch(r"call_[0-9a-f]{24}" if regex_stream else r"chatcmpl-tool-[0-9a-f]{32}", first["id"])
    assert first["function"]["name"] == "bash"
    assert ("arguments" in first["function"]) == (family in ("0.19", "0.23"))
    pieces = [f["function"]["arguments"] for f in rest]
    assert json.loads("".join(pieces)) == ALLOWED
    if regex_stream:  # "{", then whole parameters, then "}": never a cut inside a value
        assert pieces == ["{", '"command": "uv run scripts/search.py \\"café ✓\\""', ', "timeout": 30', "}"]
    else:
        assert max(map(len, pieces)) <= 5


def test_the_default_family_keeps_the_shape_the_tests_were_written_against(
    family_upstream: Callable[..., ScriptedUpstream],
) -> None:
    upstream = ScriptedUpstream(models=[MODEL])
    assert upstream.version == "0.19.0" and upstream.bytes is None
    reply = Reply(tool_calls=[("bash", ALLOWED)])
    [_, header, *_] = upstream.deltas(reply)
    assert header["tool_calls"][0]["function"] == {"name": "bash", "arguments": ""}
    assert header["tool_calls"][0]["id"].startswith("chatcmpl-tool-")


@pytest.mark.parametrize(("family", "parser"),
                         [("0.19", "qwen3_coder"), ("0.24", "qwen3_xml"), ("0.34", "qwen3_coder")])
def test_the_proxy_relays_each_familys_tool_calls(
    family: str, parser: str, family_upstream: Callable[..., ScriptedUpstream],
    start_proxy: Callable[..., RunningProxy],
) -> None:
    upstream = family_upstream(family, parser, keep_alive=True)
    proxy = start_proxy(upstream.url)
    upstream.script(Reply(content="Searching.", tool_calls=[("bash", ALLOWED)]))
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat(tools=OPENCODE_TOOLS, stream=True))
    assert response.status_code == 200
    fragments = tool_fragments(sse_json(response.content))
    assert fragments[0]["function"]["name"] == "bash" and fragments[0]["id"]
    assert json.loads("".join(f["function"].get("arguments") or "" for f in fragments)) == ALLOWED
