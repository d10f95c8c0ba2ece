"""Open Interpreter, unchanged, through its Python API (`OpenInterpreter`, `auto_run` on, as its docs show for running
it from a script) on an OpenAI-compatible base URL.

For a model name it does not know (any vLLM model), Open Interpreter offers no tools and runs the markdown code blocks
of the model's answers (`text` mode); told the model calls functions, it offers its one tool `execute {language,
code}` (`tools` mode). It streams every request.

Run by tests/e2e/test_text_agents.py with the python of Open Interpreter's own venv (scripts/install-agent-pys.sh):
    python open-interpreter_agent.py BASE_URL MODEL PROJECT PROMPT MODE
Prints one JSON line: {"answer": the last message, "ran": [code it ran]} or {"error": type, "message": ...}.
"""

import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # nothing outside 127.0.0.1 is reached


def main() -> None:
    base_url, model_id, project, prompt, mode = sys.argv[1:6]
    os.chdir(project)
    from interpreter import OpenInterpreter

    agent = OpenInterpreter(auto_run=True, offline=True, disable_telemetry=True, max_output=2000)
    agent.llm.model = f"openai/{model_id}"
    agent.llm.api_base = base_url
    agent.llm.api_key = "none"
    agent.llm.context_window, agent.llm.max_tokens = 32000, 1000
    agent.llm.supports_functions = mode == "tools"
    try:
        messages = agent.chat(prompt, display=False, stream=False)
    except Exception as error:  # what the user of the agent is shown
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    said = [m.get("content") for m in messages if m.get("role") == "assistant" and m.get("type") == "message"]
    ran = [m.get("content") for m in messages if m.get("role") == "assistant" and m.get("type") == "code"]
    print(json.dumps({"answer": said[-1] if said else "", "ran": ran}))


if __name__ == "__main__":
    main()
