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
import subprocess
import sys
from pathlib import Path

from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI


async def main() -> None:
    base_url, model_id, project, prompt, mode = sys.argv[1:6]
    set_tracing_disabled(True)  # its exporter would post to OpenAI
    client = AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0)

    @function_tool
    def run_shell(command: str) -> str:
        """Runs a shell command in the project and returns its output.

        Args:
            command: the command line to run.
        """
        done = subprocess.run(["bash", "-c", command], cwd=project, capture_output=True, text=True, timeout=30)
        return done.stdout + done.stderr

    @function_tool
    def read_file(path: str) -> str:
        """Reads a text file.

        Args:
            path: the file's path.
        """
        return Path(path).read_text()

    if mode.startswith("chat"):
        model = OpenAIChatCompletionsModel(model=model_id, openai_client=client)
    else:
        model = OpenAIResponsesModel(model=model_id, openai_client=client)
    agent = Agent(name="Assistant", instructions="You are a careful coding agent.", model=model,
                  tools=[run_shell, read_file])
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
