"""What DSPy, aider and Open Interpreter themselves read from an answer: run by the python of the client's own venv
(scripts/install-agent-pys.sh) by tests/toolcalls/test_text_agent_parsers.py.

    python text_agent_oracles.py CLIENT < {"cases": [...], ...}

Prints one JSON list, one result per case:
- dspy: {"name", "args"} of the step ReAct would run, or {"error"} (the adapter refused the answer); cases are
  {"adapter": "chat" | "json", "text"};
- aider: {"edits": [path, ...], "shell": [command, ...]} or {"error"}; cases are {"format", "text", "files", "fence"};
- open-interpreter: {"language", "code"} of the first block as run_text_llm streams it, or null; cases are lists of
  the chunks' content.
"""

import json
import sys
import types


def dspy_cases(cases):
    import dspy

    def run_shell(command: str) -> str:
        """Runs a shell command."""
        return ""

    def read_text(path: str) -> str:
        """Reads a text file."""
        return ""

    signature = dspy.ReAct("question -> answer", tools=[run_shell, read_text]).react.signature
    out = []
    for case in cases:
        adapter = dspy.JSONAdapter() if case["adapter"] == "json" else dspy.ChatAdapter()
        try:
            fields = adapter.parse(signature, case["text"])
            out.append({"name": fields["next_tool_name"], "args": fields["next_tool_args"]})
        except Exception as error:
            out.append({"error": type(error).__name__})
    return out


def aider_cases(cases):
    from aider.coders import udiff_coder, wholefile_coder
    from aider.coders.editblock_coder import find_original_update_blocks

    out = []
    for case in cases:
        fence = tuple(case.get("fence") or ("```", "```"))
        files = case.get("files") or []
        try:
            if case["format"] in ("diff", "diff-fenced"):
                found = list(find_original_update_blocks(case["text"], fence, files))
                out.append({"edits": [f[0] for f in found if f[0] is not None],
                            "shell": [line.strip() for f in found if f[0] is None
                                      for line in f[1].strip().splitlines()
                                      if line.strip() and not line.strip().startswith("#")]})
            elif case["format"] == "whole":
                coder = types.SimpleNamespace(fence=fence, get_inchat_relative_files=lambda files=files: files,
                                              get_multi_response_content_in_progress=lambda text=case["text"]: text,
                                              abs_root_path=lambda path: path)
                edits = wholefile_coder.WholeFileCoder.get_edits(coder, mode="update")
                out.append({"edits": [e[0] for e in edits], "shell": []})
            else:
                coder = types.SimpleNamespace(partial_response_content=case["text"])
                edits = udiff_coder.UnifiedDiffCoder.get_edits(coder)
                out.append({"edits": [e[0] for e in edits if e[0] is not None], "shell": []})
        except Exception as error:
            out.append({"error": type(error).__name__})
    return out


def open_interpreter_cases(cases):
    from interpreter.core.llm.run_text_llm import run_text_llm

    out = []
    for chunks in cases:
        client = types.SimpleNamespace(verbose=False, os=False)
        llm = types.SimpleNamespace(execution_instructions=None, interpreter=client)
        llm.completions = lambda chunks=chunks, **params: iter(
            {"choices": [{"delta": {"content": c}}]} for c in chunks)
        language, code = None, ""
        for piece in run_text_llm(llm, {"messages": [{"role": "system", "content": ""}]}):
            if piece["type"] == "code":
                language = piece["format"]
                code += piece["content"]
        out.append({"language": language, "code": code} if language else None)
    return out


def main() -> None:
    client = sys.argv[1]
    cases = json.load(sys.stdin)["cases"]
    run = {"dspy": dspy_cases, "aider": aider_cases, "open-interpreter": open_interpreter_cases}[client]
    print(json.dumps(run(cases)))


if __name__ == "__main__":
    main()
