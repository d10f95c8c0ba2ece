"""mini-swe-agent's DefaultAgent on its own text-based config (mini_textbased.yaml: ```mswea_bash_command blocks), or
with MODE `tools` on its default config (mini.yaml: a `bash` tool), unchanged, pointed at a base URL through litellm.

Run by tests/e2e/test_pypi_clients.py with the python of mini-swe-agent's own venv:
    python mini-swe-agent_agent.py BASE_URL MODEL PROJECT PROMPT [MODE]
Prints one JSON line: {"answer": exit status} or {"error": type, "message": ...}.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # nothing outside 127.0.0.1 is reached

import minisweagent
import yaml
from minisweagent.agents.default import DefaultAgent
from minisweagent.environments.local import LocalEnvironment
from minisweagent.models.litellm_model import LitellmModel
from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel


def main() -> None:
    base_url, model_id, project, prompt = sys.argv[1:5]
    tools = sys.argv[5:6] == ["tools"]
    name = "mini.yaml" if tools else "mini_textbased.yaml"
    config = yaml.safe_load((Path(minisweagent.__file__).parent / "config" / name).read_text())
    model_config = {k: v for k, v in config.get("model", {}).items() if k not in ("model_name", "model_kwargs")}
    model = (LitellmModel if tools else LitellmTextbasedModel)(
        model_name=f"openai/{model_id}", cost_tracking="ignore_errors",
        model_kwargs={"api_base": base_url, "api_key": "none"}, **model_config)
    env = LocalEnvironment(cwd=project, **config.get("environment", {}))
    agent_config = {**config["agent"], "step_limit": 8, "cost_limit": 0}
    agent = DefaultAgent(model, env, **agent_config)
    try:
        result = agent.run(prompt)
    except Exception as error:
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    print(json.dumps({"answer": str(result.get("exit_status") if isinstance(result, dict) else result)}))


if __name__ == "__main__":
    main()
