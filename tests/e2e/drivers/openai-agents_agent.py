"""The OpenAI Agents SDK, unchanged: an Agent with function tools (a shell and a file reader), on the model class its
docs give for a non-OpenAI provider, pointed at a base URL.

Run by tests/e2e/test_pypi_clients.py with the python of the SDK's own venv (scripts/install-agent-pys.sh):
    python openai-agents_agent.py BASE_URL MODEL PROJECT PROMPT MODE
MODE: `chat` (OpenAIChatCompletionsModel), `responses` (OpenAIResponsesModel, the whole input each turn) or
`responses-chained` (OpenAIResponsesModel with `auto_previous_response_id`: each turn continues the last response by
its id); `-stream` appended runs it with `Runner.run_streamed`.
Prints one JSON line: {"answer": ...} or {"error": type, "message": ...} when the run raised.
"""

import asyncio
import json
import sys

from agent_tools import read_text, run_shell
from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI


async def main() -> None:
    base_url, model_id, _project, prompt, mode = sys.argv[1:6]
    set_tracing_disabled(True)  # its exporter would post to OpenAI
    client = AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0)
    tools = [function_tool(run_shell), function_tool(read_text, name_override="read_file")]
    if mode.startswith("chat"):
        model = OpenAIChatCompletionsModel(model=model_id, openai_client=client)
    else:
        model = OpenAIResponsesModel(model=model_id, openai_client=client)
    agent = Agent(name="Assistant", instructions="You are a careful coding agent.", model=model, tools=tools)
    options = {"max_turns": 8, "auto_previous_response_id": "chained" in mode}
    try:
        if mode.endswith("-stream"):
            result = Runner.run_streamed(agent, prompt, **options)
            async for _ in result.stream_events():
                pass
        else:
            result = await Runner.run(agent, prompt, **options)
    except Exception as error:  # what the user of the SDK is shown
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    print(json.dumps({"answer": str(result.final_output)}))


if __name__ == "__main__":
    asyncio.run(main())
