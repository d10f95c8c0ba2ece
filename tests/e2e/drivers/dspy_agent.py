"""DSPy's ReAct agent, unchanged, with two plain tools (a shell and a file reader), on `dspy.LM` at a base URL. ReAct
offers no `tools` in its requests: the model writes its action into fields of its answer, by the adapter's format.

Run by tests/e2e/test_text_agents.py with the python of DSPy's own venv (scripts/install-agent-pys.sh):
    python dspy_agent.py BASE_URL MODEL PROJECT PROMPT MODE
MODE: `chat` (ChatAdapter: `[[ ## next_tool_name ## ]]` fields), `chat-stream` (the same, streamed through
`dspy.streamify`) or `json` (JSONAdapter: one JSON object).
Prints one JSON line: {"answer": ..., "steps": [tool names]} or {"error": type, "message": ...}.
"""

import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # nothing outside 127.0.0.1 is reached

import dspy
from agent_tools import read_text, run_shell


def main() -> None:
    base_url, model_id, _project, prompt, mode = sys.argv[1:6]
    lm = dspy.LM(f"openai/{model_id}", api_base=base_url, api_key="none", cache=False, num_retries=0)
    adapter = dspy.JSONAdapter() if mode == "json" else dspy.ChatAdapter(use_json_adapter_fallback=False)
    dspy.configure(lm=lm, adapter=adapter)
    agent = dspy.ReAct("question -> answer", tools=[run_shell, read_text], max_iters=6)
    try:
        if mode.endswith("-stream"):
            streamed = dspy.streamify(agent, async_streaming=False)
            prediction = next(p for p in streamed(question=prompt) if isinstance(p, dspy.Prediction))
        else:
            prediction = agent(question=prompt)
    except Exception as error:  # what the user of the agent is shown
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    steps = [v for k, v in prediction.trajectory.items() if k.startswith("tool_name_")]
    print(json.dumps({"answer": str(prediction.answer), "steps": steps}))


if __name__ == "__main__":
    main()
