"""smolagents' ToolCallingAgent, unchanged, with a shell tool and a read tool, pointed at a base URL.

Run by tests/e2e/test_pypi_clients.py with the python of smolagents' own venv (scripts/install-agent-pys.sh):
    python smolagents_agent.py BASE_URL MODEL PROJECT PROMPT
Prints one JSON line: {"answer": ...} or {"error": type, "message": ...} when the run raised.
"""

import json
import sys

from agent_tools import read_text, run_shell
from smolagents import OpenAIServerModel, ToolCallingAgent, tool


def main() -> None:
    base_url, model_id, _project, prompt = sys.argv[1:5]
    model = OpenAIServerModel(model_id=model_id, api_base=base_url, api_key="none", client_kwargs={"max_retries": 0})
    agent = ToolCallingAgent(tools=[tool(run_shell), tool(read_text)], model=model, max_steps=6, verbosity_level=0)
    try:
        answer = agent.run(prompt)
    except Exception as error:  # what the user of smolagents is shown
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    print(json.dumps({"answer": str(answer)}))


if __name__ == "__main__":
    main()
