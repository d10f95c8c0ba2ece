"""The OpenAI Agents SDK, unchanged: an Agent with function tools (a shell and a file reader), on the model class its
docs give for a non-OpenAI provider, pointed at a base URL.

Run by tests/e2e/test_sdk_agents.py with the python of the SDK's own venv (scripts/install-agent-pys.sh):
    python openai-agents_agent.py BASE_URL MODEL PROJECT PROMPT MODE FOLLOW_UP
MODE: `chat` (OpenAIChatCompletionsModel), `responses` (OpenAIResponsesModel, the whole input each turn) or
`responses-chained` (OpenAIResponsesModel with `auto_previous_response_id`: each turn continues the last response by
its id); `-stream` appended runs it with `Runner.run_streamed`; with `required` in it, the agent's
`tool_choice` is "required" (the SDK resets it after a call).
Two runs of one conversation: PROMPT, then the user's FOLLOW_UP.
Prints one JSON line: {"answer": ..., "follow_up": ...} or {"error": type, "message": ...} when a run raised.
"""

import asyncio
import json
import sys
from typing import Any

from agent_tools import read_text, run_shell
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.result import RunResultBase
from openai import AsyncOpenAI


async def main() -> None:
    base_url, model_id, _project, prompt, mode, follow_up = sys.argv[1:7]
    set_tracing_disabled(True)  # its exporter would post to OpenAI
    client = AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0)
    tools = [function_tool(run_shell), function_tool(read_text, name_override="read_file")]
    if mode.startswith("chat"):
        model = OpenAIChatCompletionsModel(model=model_id, openai_client=client)
    else:
        model = OpenAIResponsesModel(model=model_id, openai_client=client)
    settings = ModelSettings(tool_choice="required" if "required" in mode else None)
    agent = Agent(name="Assistant", instructions="You are a careful coding agent.", model=model, tools=tools,
                  model_settings=settings)
    chained = "chained" in mode

    async def run(given: Any, **options: Any) -> RunResultBase:
        if mode.endswith("-stream"):
            streamed = Runner.run_streamed(agent, given, max_turns=8, **options)
            async for _ in streamed.stream_events():
                pass
            return streamed
        return await Runner.run(agent, given, max_turns=8, **options)

    try:
        first = await run(prompt, auto_previous_response_id=chained)
        # The user's next message in the same conversation: by the last response's id, or the whole history.
        if chained:
            then = await run(follow_up, previous_response_id=first.last_response_id, auto_previous_response_id=True)
        else:
            then = await run([*first.to_input_list(), {"role": "user", "content": follow_up}])
    except Exception as error:  # what the user of the SDK is shown
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    print(json.dumps({"answer": str(first.final_output), "follow_up": str(then.final_output)}))


if __name__ == "__main__":
    asyncio.run(main())
