"""Realistic sessions for `allowlist-proxy demo`: a dense-like model that switches to an allowed
script at the first refusal, and a MoE-like model that loops on variants of a blocked shape."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

import httpx

from proxy.testing.characters import OPENCODE_TOOLS, bash_sequence
from proxy.testing.scripted_upstream import Reply, ScriptedUpstream

__all__ = ["DENSE", "MOE", "demo_upstream", "drive_sessions", "streamed_message"]

DENSE = "qwen3.5-27b"
MOE = "qwen3.6-35b-a3b"

_TASKS = ["rust async runtimes", "python packaging", "vllm tool parsers", "sqlite wal mode", "opencode config"]


def _responder(body: dict[str, Any]) -> Reply:
    task = next((m["content"] for m in body.get("messages", []) if m.get("role") == "user"), "docs")
    query = str(task).removeprefix("Find ")
    base = f'uv run scripts/search.py "{query}"'
    if not body.get("tools"):
        return Reply(content=f"Search: {query}")  # OpenCode's title request
    reply = _turn_reply(body, base, query)
    # Streamed at a model's pace rather than at once, so that requests overlap and fill throughput windows.
    reply.chunk_delay = 0.03
    return reply


def _turn_reply(body: dict[str, Any], base: str, query: str) -> Reply:
    if body.get("model") == MOE:
        turn = bash_sequence([f"{base} | head -5", f"{base} | head -10", f"{base} | tail -3", base],
                             content="Let me search. ", final=f"Here is what I found about {query}.")
    else:
        turn = bash_sequence([f"{base} 2>&1 | head -20", base], content="Searching. ",
                             final=f"Summary of {query}.")
    return turn(body)


def demo_upstream() -> ScriptedUpstream:
    return ScriptedUpstream(models=[DENSE, MOE], responder=_responder)


async def _turn(client: httpx.AsyncClient, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    """One streamed request, read as OpenCode reads it (`streamed_message`)."""
    async with client.stream("POST", "/v1/chat/completions", headers=headers,
                             json={**body, "stream": True, "stream_options": {"include_usage": True}}) as response:
        response.raise_for_status()
        return streamed_message([line async for line in response.aiter_lines()])


def streamed_message(lines: Iterable[str]) -> dict[str, Any]:
    """The assistant message a chat stream's lines make, as OpenCode reads them: text deltas joined, tool calls
    assembled by index."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for line in lines:
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line[6:]).get("choices", []):
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            for part in delta.get("tool_calls") or []:
                call = calls.setdefault(part["index"], {"id": None, "type": "function",
                                                        "function": {"name": "", "arguments": ""}})
                call["id"] = part.get("id") or call["id"]
                function = part.get("function") or {}
                call["function"]["name"] += function.get("name") or ""
                call["function"]["arguments"] += function.get("arguments") or ""
    return {"content": "".join(content), "tool_calls": [calls[i] for i in sorted(calls)]}


async def _session(client: httpx.AsyncClient, model: str, index: int, round_: int = 0) -> None:
    """One agent session: ask, run every allowed tool call it gets, until the model answers in text."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"Find {_TASKS[index % len(_TASKS)]}"}]
    headers = {"x-session-id": f"ses_demo_{model}_{round_}_{index}"}
    for _ in range(6):
        message = await _turn(client, headers, {"model": model, "messages": messages, "tools": OPENCODE_TOOLS})
        calls = message.get("tool_calls") or []
        if not calls:
            return
        messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": calls})
        for call in calls:
            command = json.loads(call["function"]["arguments"]).get("command", "")
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"3 results for {command}"})


async def drive_sessions(base_url: str, sessions_per_model: int, *, duration: float = 0.0,
                         pause: float = 0.0) -> int:
    """Runs rounds of sessions (streamed, as OpenCode sends them), `pause` seconds apart, until `duration`
    seconds have passed, at least one round, so that the live throughput windows fill. Returns the rounds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + duration
    rounds = 0
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        while rounds == 0 or loop.time() < deadline:
            await asyncio.gather(*(_session(client, model, i, rounds) for model in (DENSE, MOE)
                                   for i in range(sessions_per_model)))
            rounds += 1
            if loop.time() + pause < deadline:
                await asyncio.sleep(pause)
    return rounds
