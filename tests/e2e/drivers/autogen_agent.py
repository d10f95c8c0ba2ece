"""AutoGen AgentChat, unchanged: an `AssistantAgent` with function tools (a shell and a file reader), on
autogen-ext's `OpenAIChatCompletionClient` at a base URL, as its docs show for a model it does not know.

Run by tests/e2e/test_tool_agents.py with the python of AutoGen's own venv (scripts/install-agent-pys.sh):
    python autogen_agent.py BASE_URL MODEL PROJECT PROMPT MODE FOLLOW_UP
MODE: `run` (whole answers) or `stream` (`model_client_stream`). Two runs of one conversation (the agent keeps its
model context): PROMPT, then the user's FOLLOW_UP.
Prints one JSON line: {"answer": ..., "follow_up": ...} or {"error": type, "message": ...} when a run raised.
"""

import asyncio
import json
import os
import sys

from agent_tools import read_text, run_shell


async def main() -> None:
    base_url, model_id, project, prompt, mode, follow_up = sys.argv[1:7]
    os.chdir(project)
    from autogen_agentchat.agents import AssistantAgent
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(
        model=model_id, base_url=base_url, api_key="none", max_retries=0,
        model_info={"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
                    "structured_output": False})
    agent = AssistantAgent("assistant", model_client=client, tools=[run_shell, read_text],
                           system_message="You are a careful coding agent.", reflect_on_tool_use=False,
                           model_client_stream=mode == "stream", max_tool_iterations=8)
    try:
        first = await agent.run(task=prompt)
        then = await agent.run(task=follow_up)  # the user's next message in the same conversation
    except Exception as error:  # what the user of the agent is shown
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    finally:
        await client.close()
    print(json.dumps({"answer": str(first.messages[-1].content).strip(),
                      "follow_up": str(then.messages[-1].content).strip()}))


if __name__ == "__main__":
    asyncio.run(main())
