"""Realistic sessions for `allowlist-proxy demo`: a dense-like model that switches to an allowed
script at the first refusal, and a MoE-like model that loops on variants of a blocked shape."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from proxy.testing.characters import OPENCODE_TOOLS, bash_sequence
from proxy.testing.scripted_upstream import Reply, ScriptedUpstream

__all__ = ["DENSE", "MOE", "demo_upstream", "drive_sessions"]

DENSE = "qwen3.5-27b"
MOE = "qwen3.6-35b-a3b"

_TASKS = ["rust async runtimes", "python packaging", "vllm tool parsers", "sqlite wal mode", "opencode config"]


def _responder(body: dict[str, Any]) -> Reply:
    task = next((m["content"] for m in body.get("messages", []) if m.get("role") == "user"), "docs")
    query = str(task).removeprefix("Find ")
    base = f'uv run scripts/search.py "{query}"'
    if not body.get("tools"):
        return Reply(content=f"Search: {query}")  # OpenCode's title request
    if body.get("model") == MOE:
        turn = bash_sequence([f"{base} | head -5", f"{base} | head -10", f"{base} | tail -3", base],
                             content="Let me search. ", final=f"Here is what I found about {query}.")
    else:
        turn = bash_sequence([f"{base} 2>&1 | head -20", base], content="Searching. ",
                             final=f"Summary of {query}.")
    return turn(body)


def demo_upstream() -> ScriptedUpstream:
    return ScriptedUpstream(models=[DENSE, MOE], responder=_responder)


async def _session(client: httpx.AsyncClient, model: str, index: int) -> None:
    """One agent session: ask, run every allowed tool call it gets, until the model answers in text."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"Find {_TASKS[index % len(_TASKS)]}"}]
    headers = {"x-session-id": f"ses_demo_{model}_{index}"}
    for _ in range(6):
        response = await client.post("/v1/chat/completions", headers=headers, json={
            "model": model, "messages": messages, "tools": OPENCODE_TOOLS, "stream": False})
        response.raise_for_status()
        message = response.json()["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        if not calls:
            return
        messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": calls})
        for call in calls:
            command = json.loads(call["function"]["arguments"]).get("command", "")
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"3 results for {command}"})


async def drive_sessions(base_url: str, sessions_per_model: int) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        await asyncio.gather(*(_session(client, model, i) for model in (DENSE, MOE)
                               for i in range(sessions_per_model)))
