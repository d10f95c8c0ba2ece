"""LangGraph's prebuilt ReAct agent with LangChain's own shell tool (langchain_community ShellTool, `terminal
{commands}`) and file reader (ReadFileTool, `read_file {file_path}`), unchanged, on ChatOpenAI at a base URL.

Run by tests/e2e/test_sdk_agents.py with the python of LangGraph's own venv (scripts/install-agent-pys.sh):
    python langgraph_agent.py BASE_URL MODEL PROJECT PROMPT MODE FOLLOW_UP
MODE: `invoke` or `stream` (ChatOpenAI streaming, the streamed requests).
Two runs of one conversation: PROMPT, then the user's FOLLOW_UP.
Prints one JSON line: {"answer": ..., "follow_up": ...} or {"error": type, "message": ...} when a run raised.
"""

import json
import os
import sys
import warnings

from langchain_community.tools import ShellTool
from langchain_community.tools.file_management import ReadFileTool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent


def main() -> None:
    base_url, model_id, project, prompt, mode, follow_up = sys.argv[1:7]
    warnings.simplefilter("ignore")  # ShellTool warns that it has no safeguards: that is the proxy's job here
    os.chdir(project)  # ShellTool's bash process runs where the agent runs
    llm = ChatOpenAI(model=model_id, base_url=base_url, api_key="none", max_retries=0,
                     streaming=mode == "stream")
    agent = create_react_agent(llm, [ShellTool(), ReadFileTool()],
                               prompt="You are a careful coding agent.")
    try:
        first = agent.invoke({"messages": [("user", prompt)]}, {"recursion_limit": 16})
        # The user's next message in the same conversation.
        then = agent.invoke({"messages": [*first["messages"], ("user", follow_up)]}, {"recursion_limit": 16})
    except Exception as error:  # what the user of the agent is shown
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    print(json.dumps({"answer": str(first["messages"][-1].content), "follow_up": str(then["messages"][-1].content)}))


if __name__ == "__main__":
    main()
