"""smolagents' ToolCallingAgent, unchanged, with a shell tool and a read tool, pointed at a base URL.

Run by tests/e2e/test_pypi_clients.py with the python of smolagents' own venv (scripts/install-agent-pys.sh):
    python smolagents_agent.py BASE_URL MODEL PROJECT PROMPT
Prints one JSON line: {"answer": ...} or {"error": type, "message": ...} when the run raised.
"""

import json
import subprocess
import sys
from pathlib import Path

from smolagents import OpenAIServerModel, ToolCallingAgent, tool


def main() -> None:
    base_url, model_id, project, prompt = sys.argv[1:5]

    @tool
    def run_shell(command: str) -> str:
        """Runs a shell command in the project and returns its output.

        Args:
            command: the command line to run.
        """
        done = subprocess.run(["bash", "-c", command], cwd=project, capture_output=True, text=True, timeout=30)
        return done.stdout + done.stderr

    @tool
    def read_text(path: str) -> str:
        """Reads a text file.

        Args:
            path: the file's path.
        """
        return Path(path).read_text()

    model = OpenAIServerModel(model_id=model_id, api_base=base_url, api_key="none", client_kwargs={"max_retries": 0})
    agent = ToolCallingAgent(tools=[run_shell, read_text], model=model, max_steps=6, verbosity_level=0)
    try:
        answer = agent.run(prompt)
    except Exception as error:  # what the user of smolagents is shown
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    print(json.dumps({"answer": str(answer)}))


if __name__ == "__main__":
    main()
