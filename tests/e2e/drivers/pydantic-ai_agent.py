"""pydantic-ai, unchanged: an Agent on an OpenAI-compatible provider with two tools whose optional arguments it
declares as `anyOf [string, null]` (a shell with an optional `cwd`, a reader with an optional `encoding`).

Run by tests/e2e/test_sdk_agents.py with the python of pydantic-ai's own venv (scripts/install-agent-pys.sh):
    python pydantic-ai_agent.py BASE_URL MODEL PROJECT PROMPT MODE FOLLOW_UP
MODE: `run` (Agent.run on OpenAIChatModel), `stream` (Agent.run_stream_events, the streamed requests),
`responses` (OpenAIResponsesModel, the whole history each turn) or `responses-chained` (with
`openai_previous_response_id='auto'`: each turn continues the last response by its id), or `structured` (chat, its
answer a `final_result` output tool: every request demands a tool call); a mode ending in `stream` is streamed.
Two runs of one conversation: PROMPT, then the user's FOLLOW_UP.
Prints one JSON line: {"answer": ..., "follow_up": ...} or {"error": type, "message": ...} when a run raised.
"""

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI
from pydantic import BaseModel
from pydantic_ai import Agent, AgentRunResult, AgentRunResultEvent
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider


class Answer(BaseModel):
    """The agent's answer."""

    text: str


async def main() -> None:
    base_url, model_id, project, prompt, mode, follow_up = sys.argv[1:7]
    client = AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0)
    provider = OpenAIProvider(openai_client=client)
    if mode.startswith("responses"):
        model = OpenAIResponsesModel(model_id, provider=provider)
        settings = {"openai_previous_response_id": "auto"} if "chained" in mode else {}
    else:
        model, settings = OpenAIChatModel(model_id, provider=provider), {}
    output: Any = Answer if mode == "structured" else str
    agent = Agent(model, instructions="You are a careful coding agent.", model_settings=settings, output_type=output)

    @agent.tool_plain
    def run_command(command: str, cwd: str | None = None) -> str:
        """Runs a shell command and returns its output.

        Args:
            command: the command line to run.
            cwd: the directory to run it in (the project when left out).
        """
        done = subprocess.run(["bash", "-c", command], cwd=cwd or project, capture_output=True, text=True,
                              timeout=30)
        return done.stdout + done.stderr

    @agent.tool_plain
    def read_file(path: str, encoding: str | None = None) -> str:
        """Reads a text file.

        Args:
            path: the file's path.
            encoding: its text encoding (UTF-8 when left out).
        """
        return Path(path).read_text(encoding=encoding or "utf-8")

    async def run(given: str, history: list[Any] | None) -> AgentRunResult[Any]:
        if not mode.endswith("stream"):
            return await agent.run(given, message_history=history)
        async with agent.run_stream_events(given, message_history=history) as events:
            async for event in events:
                if isinstance(event, AgentRunResultEvent):
                    return event.result
        raise RuntimeError("the stream ended without a result")

    try:
        first = await run(prompt, None)
        then = await run(follow_up, first.all_messages())  # the user's next message in the same conversation
    except Exception as error:  # what the user of pydantic-ai is shown
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    print(json.dumps({"answer": str(first.output), "follow_up": str(then.output)}))


if __name__ == "__main__":
    asyncio.run(main())
