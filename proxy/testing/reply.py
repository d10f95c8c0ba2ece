"""One scripted answer of the test upstream (`ScriptedUpstream`), whatever the dialect it is spoken in."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Reply", "arguments_text", "pace"]


@dataclass(kw_only=True)
class Reply:
    content: str = ""
    reasoning: str | None = None
    reasoning_field: str = "reasoning"  # vLLM >= 0.16; older servers use reasoning_content
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)  # (name, dict or raw arguments text)
    finish_reason: str | None = None
    prompt_tokens: int = 12
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    status: int = 200
    error_message: str | None = None  # with status >= 400: vLLM's error body
    stream_error_after: int | None = None  # an error event after this many chunks, then [DONE]
    drop_after: int | None = None  # the connection breaks after this many chunks
    stall: float = 0.0  # seconds before the response starts
    chunk_delay: float = 0.0  # seconds between chunks
    # Chunk n is due chunk_delay * n after the first, as a GPU paces its tokens: a chunk sent late (a busy
    # machine) does not delay the ones after it.
    steady: bool = False
    content_chunk: int = 4  # characters per content delta
    arguments_chunk: int = 7  # characters per tool-argument delta
    extra_message: dict[str, Any] = field(default_factory=dict)  # unknown fields that must survive

    def finish(self) -> str:
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")

    def tokens(self) -> int:
        if self.completion_tokens is not None:
            return self.completion_tokens
        text = self.content + (self.reasoning or "") + "".join(arguments_text(a) for _, a in self.tool_calls)
        return max(1, len(text) // 4)


def arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


async def pace(reply: Reply, sent: int, started: float) -> None:
    """Wait before the chunk after `sent` chunks; `started` is `time.monotonic()` at the first."""
    if not reply.chunk_delay:
        return
    if not reply.steady:
        await asyncio.sleep(reply.chunk_delay)
        return
    await asyncio.sleep(max(0.0, started + sent * reply.chunk_delay - time.monotonic()))
