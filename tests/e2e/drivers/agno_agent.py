"""Agno, unchanged, with its stock `ShellTools` (`run_shell_command {args}`: an argv, run without a shell) and
`FileTools` (`read_file {file_name}` ...), on `OpenAILike` at a base URL.

Run by tests/e2e/test_tool_agents.py with the python of Agno's own venv (scripts/install-agent-pys.sh):
    python agno_agent.py BASE_URL MODEL PROJECT PROMPT MODE FOLLOW_UP
MODE: `run` (whole answers) or `stream`. Two runs of one conversation (its history kept in Agno's in-memory db):
PROMPT, then the user's FOLLOW_UP.
Prints one JSON line: {"answer": ..., "follow_up": ...} or {"error": type, "message": ...} when a run raised.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("AGNO_TELEMETRY", "false")  # nothing outside 127.0.0.1 is reached


def main() -> None:
    base_url, model_id, project, prompt, mode, follow_up = sys.argv[1:7]
    os.chdir(project)
    from agno.agent import Agent
    from agno.db.in_memory import InMemoryDb
    from agno.models.openai.like import OpenAILike
    from agno.tools.file import FileTools
    from agno.tools.shell import ShellTools

    model = OpenAILike(id=model_id, base_url=base_url, api_key="none", max_retries=0)
    agent = Agent(model=model, tools=[ShellTools(), FileTools(base_dir=Path(project))], telemetry=False,
                  instructions="You are a careful coding agent.", db=InMemoryDb(), add_history_to_context=True)
    stream = mode == "stream"

    def run(message: str) -> str:
        if stream:
            for _ in agent.run(message, session_id="conversation", stream=True):
                pass
            output = agent.get_last_run_output(session_id="conversation")
        else:
            output = agent.run(message, session_id="conversation")
        # The run's content joins every assistant text of it; the answer is its last assistant message.
        said = [m.content for m in (output.messages or []) if m.role == "assistant" and m.content] if output else []
        return str(said[-1] if said else "").strip()

    try:
        answer, then = run(prompt), run(follow_up)
    except Exception as error:  # what the user of the agent is shown
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    print(json.dumps({"answer": answer, "follow_up": then}))


if __name__ == "__main__":
    main()
