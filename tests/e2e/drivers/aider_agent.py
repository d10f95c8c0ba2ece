"""aider, unchanged, through its Python API (`Coder.create`, as its scripting docs show) on an OpenAI-compatible base
URL: it offers no tools; the model edits files by writing them in the edit format (SEARCH/REPLACE blocks, whole
files, unified diffs) and suggests shell commands in ```bash blocks, which aider runs once its user says yes.

Run by tests/e2e/test_text_agents.py with the python of aider's own venv (scripts/install-agent-pys.sh):
    python aider_agent.py BASE_URL MODEL PROJECT PROMPT MODE [FILE ...]
MODE: the edit format (`diff`, `whole`, `udiff`, `diff-fenced`), with `-stream` appended for a streamed run. FILEs are
added to the chat. The user answers yes to every question (running a suggested command, editing a file).
Prints one JSON line: {"answer": the last reply, "edited": [files aider wrote]} or {"error": type, "message": ...}.
"""

import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # nothing outside 127.0.0.1 is reached


def main() -> None:
    base_url, model_id, project, prompt, mode, *files = sys.argv[1:]
    os.environ.update(OPENAI_API_BASE=base_url, OPENAI_API_KEY="none")
    os.chdir(project)
    from aider.coders import Coder
    from aider.io import InputOutput
    from aider.models import Model

    class User(InputOutput):
        """The user at aider's prompt, who says yes to everything it asks (running a suggested command too)."""

        def confirm_ask(self, *args, **kwargs):
            return True

    io = User(pretty=False, fancy_input=False, yes=True)
    model = Model(f"openai/{model_id}")
    edit_format = mode.removesuffix("-stream")
    try:
        coder = Coder.create(main_model=model, io=io, fnames=files, edit_format=edit_format, auto_commits=False,
                             dirty_commits=False, use_git=False, stream=mode.endswith("-stream"),
                             suggest_shell_commands=True, map_tokens=0, detect_urls=False)
        answer = coder.run(with_message=prompt)
    except Exception as error:  # what the user of aider is shown
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    print(json.dumps({"answer": answer, "edited": sorted(coder.aider_edited_files)}))


if __name__ == "__main__":
    main()
