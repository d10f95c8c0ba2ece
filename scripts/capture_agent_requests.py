"""Captures the first request each Python agent of scripts/install-agent-pys.sh sends, through its own driver
(tests/e2e/drivers/), against a recording scripted upstream: the tools it offers into
tests/policy/client_tools/<name>.json, and for the agents that act on text, what it writes into its request (its
prompt) into tests/text_clients_data/<name>.json, the project's path replaced by `{cwd}` and the HOME by `{home}`.

Run after scripts/install-agent-pys.sh: `python scripts/capture_agent_requests.py [name ...]`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.testing.scripted_upstream import Reply, ScriptedUpstream  # noqa: E402
from proxy.testing.server import ServerThread  # noqa: E402

MODEL = "qwen3.5-27b"
PROMPT = "Search the notes for x, then read the notes."
DRIVERS = ROOT / "tests" / "e2e" / "drivers"
CACHE = Path(os.environ.get("AGENT_PYS_CACHE", Path.home() / ".cache" / "allowlist-proxy-e2e-py"))

# name -> (venv, driver arguments after PROMPT, what it records: "tools" | "prompt", the package it came from)
CAPTURES: dict[str, tuple[str, list[str], str, str]] = {
    "strands": ("strands", ["stream", "Thanks."], "tools", "strands-agents-tools"),
    "agno": ("agno", ["run", "Thanks."], "tools", "agno"),
    "autogen": ("autogen", ["run", "Thanks."], "tools", "autogen-agentchat"),
    "open-interpreter": ("open-interpreter", ["tools"], "tools", "open-interpreter"),
    "open-interpreter-text": ("open-interpreter", ["text"], "prompt", "open-interpreter"),
    "dspy-chat": ("dspy", ["chat"], "prompt", "dspy"),
    "dspy-json": ("dspy", ["json"], "prompt", "dspy"),
    "aider-diff": ("aider", ["diff", "notes.txt"], "prompt", "aider-chat"),
    "aider-diff-fenced": ("aider", ["diff-fenced", "notes.txt"], "prompt", "aider-chat"),
    "aider-whole": ("aider", ["whole", "notes.txt"], "prompt", "aider-chat"),
    "aider-udiff": ("aider", ["udiff", "notes.txt"], "prompt", "aider-chat"),
    "mini-swe-agent-tools": ("mini-swe-agent", ["tools"], "prompt", "mini-swe-agent"),
}


def _version(venv: Path, package: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=60)
    return done.stdout.strip()


def _scrub(value: Any, replacements: dict[str, str]) -> Any:
    text = json.dumps(value, ensure_ascii=False)
    for real, placeholder in replacements.items():
        text = text.replace(json.dumps(real)[1:-1], placeholder)
    return json.loads(text)


def capture(name: str) -> dict[str, Any] | None:
    client, arguments, kind, package = CAPTURES[name]
    venv = CACHE / client
    if not (venv / ".installed").exists():
        print(f"{name}: {client} is not installed in {venv}", file=sys.stderr)
        return None
    upstream = ScriptedUpstream(models=[MODEL], responder=lambda body: Reply(content="Done."))
    with ServerThread(upstream.app) as server, tempfile.TemporaryDirectory() as tmp:
        home, project = Path(tmp) / "home", Path(tmp) / "project"
        (project / "scripts").mkdir(parents=True)
        home.mkdir()
        (project / "scripts" / "search.py").write_text("print('results')\n")
        (project / "notes.txt").write_text("NOTES\n")
        env = {"PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin:/bin", "HOME": str(home), "NO_COLOR": "1"}
        argv = [str(venv / "bin" / "python"), str(DRIVERS / f"{client}_agent.py"), server.url + "/v1", MODEL,
                str(project), PROMPT, *arguments]
        subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=300)
        if not upstream.requests:
            print(f"{name}: no request reached the upstream", file=sys.stderr)
            return None
        first, headers = upstream.requests[0], upstream.headers[0]
        replacements = {str(project): "{cwd}", str(home): "{home}"}
        record: dict[str, Any] = {"client": f"{package}@{_version(venv, package)}", "route": "chat",
                                  "user_agent": headers.get("user-agent"), "session_header": None,
                                  "note": f"The first request of tests/e2e/drivers/{client}_agent.py "
                                          f"{' '.join(arguments)}, by scripts/capture_agent_requests.py."}
        if kind == "tools":
            record["tools"] = _scrub(first.get("tools") or [], replacements)
        else:
            record["messages"] = _scrub(first.get("messages") or [], replacements)
        return record


def main() -> None:
    for name in sys.argv[1:] or list(CAPTURES):
        record = capture(name)
        if record is None:
            continue
        folder = ROOT / "tests" / ("policy/client_tools" if "tools" in record else "text_clients_data")
        folder.mkdir(exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(f"{name}: {folder.name}/{name}.json", file=sys.stderr)


if __name__ == "__main__":
    main()
