"""Strands Agents, unchanged, with the stock tools of strands-agents-tools (`shell`, `file_read`, `editor`), on its
OpenAI model class at a base URL (it streams every request).

Run by tests/e2e/test_tool_agents.py with the python of Strands' own venv (scripts/install-agent-pys.sh):
    python strands_agent.py BASE_URL MODEL PROJECT PROMPT MODE FOLLOW_UP
MODE: `stream` (the one Strands has). Two runs of one conversation: PROMPT, then the user's FOLLOW_UP.
Prints one JSON line: {"answer": ..., "follow_up": ...} or {"error": type, "message": ...} when a run raised.
"""

import json
import os
import sys
import warnings

# strands-agents-tools asks its user before running a command or writing a file, unless told not to: the proxy is
# what decides here.
os.environ["BYPASS_TOOL_CONSENT"] = "true"


def main() -> None:
    base_url, model_id, project, prompt, _mode, follow_up = sys.argv[1:7]
    warnings.simplefilter("ignore")  # the editor tool warns that it is deprecated
    os.chdir(project)
    from strands import Agent
    from strands.models.openai import OpenAIModel
    from strands_tools import editor, file_read, shell

    model = OpenAIModel(client_args={"base_url": base_url, "api_key": "none", "max_retries": 0}, model_id=model_id,
                        params={"max_tokens": 1000})
    agent = Agent(model=model, tools=[shell, file_read, editor], system_prompt="You are a careful coding agent.",
                  callback_handler=None)
    try:
        first = agent(prompt)
        then = agent(follow_up)  # the user's next message in the same conversation
    except Exception as error:  # what the user of the agent is shown
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    print(json.dumps({"answer": str(first).strip(), "follow_up": str(then).strip()}))


if __name__ == "__main__":
    main()
