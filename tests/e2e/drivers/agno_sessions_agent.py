"""Agno's Agent, unchanged, with a shell tool, pointed at a base URL through its OpenAI-compatible model (`OpenAILike`,
which rewrites every delivered call id that lacks its `call_` prefix before each request).

Run by tests/e2e/test_agno_sessions.py with the python of Agno's own venv (scripts/install-agent-pys.sh):
    python agno_sessions_agent.py BASE_URL MODEL PROJECT PROMPT
Prints one JSON line: {"answer": ...} or {"error": type, "message": ...} when the run raised.
"""

import json
import sys

from agent_tools import run_shell
from agno.agent import Agent
from agno.models.openai.like import OpenAILike


def main() -> None:
    base_url, model_id, _project, prompt = sys.argv[1:5]
    model = OpenAILike(id=model_id, base_url=base_url, api_key="none", max_retries=0)
    agent = Agent(model=model, tools=[run_shell], telemetry=False)
    try:
        answer = agent.run(prompt)
    except Exception as error:  # what the user of Agno is shown
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    print(json.dumps({"answer": str(answer.content)}))


if __name__ == "__main__":
    main()
