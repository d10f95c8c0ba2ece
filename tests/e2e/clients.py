"""Runs the real Qwen Code, Codex, Claude Code, Cline, Continue and Kilo CLIs headless in a throw-away world,
pointed at a base URL (the proxy), each configured the way README "Pointing an agent at it" shows.

The world: its own HOME, a project with `scripts/` and a notes file, a secret file outside the project,
and stub `uv`, `head` and `tail` first on PATH - also in the login profile, since Codex and Claude Code
run commands in login shells - that log their argv, so a test reads what a shell really ran.

The CLIs are installed outside the repository by `scripts/install-agent-clis.sh`, into
`${AGENT_CLIS_CACHE:-~/.cache/allowlist-proxy-e2e-clients}`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.e2e.facts import any_version
from tests.e2e.harness import opencode_config, run_cli

__all__ = ["AI_SDK", "CLIENTS", "AgentWorld", "ClientRun", "ClientSpec", "find_ai_sdk", "find_client", "required"]

MODEL = "qwen3.5-27b"
NOTES_MARKER = "NOTES-MARKER-7f3a: the read inside the project went through"
SECRET_MARKER = "SECRET-MARKER-91c2: this must never reach the model"

_SCRIPTS = {
    "search.py": 'import sys\nprint("results for", " ".join(sys.argv[1:]))\n',
    "fetch_page.py": 'import sys\nprint("page", sys.argv[1:])\n',
    "summarize.py": 'print("summary")\n',
}
# Each stub logs its argv. head and tail pass their input through, so a pipe that ran still "works", and
# note whether that input came from the stub uv: the clients run head and tail for their own purposes too
# (Claude Code and Cline do), and only a head fed by uv is the blocked pipe.
_STUB = """#!{python}
import json, sys
files = [a for a in sys.argv[1:] if not a.startswith("-") and not a.isdigit()]
data = ""
if {passthrough} and not files and not sys.stdin.isatty():
    data = sys.stdin.read()
with open({log!r}, "a", encoding="utf-8") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "from_uv": "STUB-UV ran" in data}}) + "\\n")
if {passthrough}:
    for name in files:
        with open(name, encoding="utf-8", errors="replace") as f:
            sys.stdout.write(f.read())
    sys.stdout.write(data)
else:
    print("STUB-UV ran: " + " ".join(sys.argv[1:]))
"""


@dataclass(frozen=True)
class ClientSpec:
    name: str  # the profile name
    package: str
    version: str
    binary: str  # under node_modules/.bin

    def argv(self, world: AgentWorld, prompt: str) -> list[str]:
        binary = str(world.binary)
        if self.name == "qwen-code":
            return [binary, "--auth-type", "openai", "--approval-mode", "yolo", "-p", prompt]
        if self.name == "codex":
            # No sandbox: the stubs log outside the workspace, and bubblewrap needs privileges CI lacks.
            return [binary, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                    "-m", MODEL, prompt]
        if self.name == "claude-code":
            # As root Claude Code refuses to skip permissions: allow the two tools the test uses.
            return [binary, "--allowedTools", "Bash,Read", "-p", prompt]
        if self.name == "continue":
            # Headless mode leaves out the tools that would ask (Bash among them) unless allowed.
            return [binary, "--config", str(world.home / ".continue" / "config.yaml"), "--allow", "Bash", "-p",
                    prompt]
        if self.name == "kilo":
            return [binary, "run", "--format", "json", "-m", f"allowlist-proxy/{MODEL}", prompt]
        return [binary, "--json", "-t", "90", prompt]  # cline: act mode, auto-approve


CLIENTS = {
    "qwen-code": ClientSpec("qwen-code", "@qwen-code/qwen-code", "0.24.4", "qwen"),
    "codex": ClientSpec("codex", "@openai/codex", "0.171.0", "codex"),
    "claude-code": ClientSpec("claude-code", "@anthropic-ai/claude-code", "2.1.332", "claude"),
    "cline": ClientSpec("cline", "cline", "3.0.65", "cline"),
    "continue": ClientSpec("continue", "@continuedev/cli", "1.5.47", "cn"),
    "kilo": ClientSpec("kilo", "@kilocode/cli", "7.7.7", "kilo"),
}


def default_cache() -> Path:
    return Path(os.environ.get("AGENT_CLIS_CACHE") or Path.home() / ".cache" / "allowlist-proxy-e2e-clients")


def find_client(spec: ClientSpec) -> tuple[Path | None, str]:
    """The client's binary, or None and why not."""
    modules = default_cache() / "node_modules"
    binary = modules / ".bin" / spec.binary
    manifest = modules / spec.package / "package.json"
    if not binary.exists() or not manifest.exists():
        return None, f"{spec.package}@{spec.version} not found in {modules}: run scripts/install-agent-clis.sh"
    version = json.loads(manifest.read_text()).get("version")
    if version != spec.version and not any_version():
        return None, f"{spec.package} is {version}, the suite needs {spec.version}"
    return binary, version


# The Vercel AI SDK packages an SDK-built agent needs, at the versions scripts/install-ai-sdk.sh pins.
AI_SDK = {"ai": "6.0.333", "@ai-sdk/openai-compatible": "2.0.92", "zod": "4.6.7"}


def find_ai_sdk() -> tuple[Path | None, str]:
    """node_modules holding the pinned AI SDK ($ALLOWLIST_PROXY_AI_SDK, else ~/.cache/allowlist-proxy-ai-sdk's),
    or None and why not."""
    if shutil.which("node") is None:
        return None, "node not found"
    modules = Path(os.environ.get("ALLOWLIST_PROXY_AI_SDK")
                   or Path.home() / ".cache" / "allowlist-proxy-ai-sdk" / "node_modules")
    for package, version in AI_SDK.items():
        manifest = modules / package / "package.json"
        if not manifest.exists():
            return None, f"{package} not found in {modules}: run scripts/install-ai-sdk.sh"
        found = json.loads(manifest.read_text()).get("version")
        if found != version:
            return None, f"{package} is {found} in {modules}, the suite needs {version}"
    return modules, "ok"


T = TypeVar("T")


def required(found: tuple[T | None, str]) -> T:
    """What a find_* function found, else skip the test with its reason; under E2E_REQUIRE_CLIENTS=1 (CI installs
    the clients) fail it."""
    value, detail = found
    if value is None:
        if os.environ.get("E2E_REQUIRE_CLIENTS") == "1":
            pytest.fail(detail)
        pytest.skip(detail)
    return value


@dataclass
class ClientRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return (f"exit {self.returncode} after {self.seconds:.1f}s\n--- stdout\n{self.stdout[-4000:]}\n"
                f"--- stderr\n{self.stderr[-4000:]}")


class AgentWorld:
    """A fresh HOME, a project, a secret outside it and the recording stubs, under `root`."""

    def __init__(self, root: Path, spec: ClientSpec, binary: Path) -> None:
        self.root, self.spec, self.binary = root, spec, binary
        self.home = root / "home"
        self.project = root / "project"
        self.outside = root / "outside"
        self.bin = root / "bin"
        self.logs = root / "logs"
        self.runs: list[ClientRun] = []
        for folder in (self.home, self.project / "scripts", self.outside, self.bin, self.logs):
            folder.mkdir(parents=True, exist_ok=True)
        for name, text in _SCRIPTS.items():
            (self.project / "scripts" / name).write_text(text)
        self.notes = self.project / "notes.txt"
        self.notes.write_text(NOTES_MARKER + "\n")
        self.secret = self.outside / "secret.txt"
        self.secret.write_text(SECRET_MARKER + "\n")
        for name in ("uv", "head", "tail"):
            stub = self.bin / name
            stub.write_text(_STUB.format(python=sys.executable, log=str(self.logs / f"{name}.jsonl"),
                                         passthrough=name != "uv"))
            stub.chmod(0o755)
        # Login shells (`bash -lc`) reset PATH from /etc/profile, then read these.
        for profile in (".bash_profile", ".profile", ".bashrc", ".zshenv"):
            (self.home / profile).write_text(f'export PATH="{self.bin}:$PATH"\n')

    def calls(self, stub: str) -> list[list[str]]:
        """The argv of each run of a stub; for head and tail only the runs fed by the stub uv (a pipe)."""
        log = self.logs / f"{stub}.jsonl"
        if not log.exists():
            return []
        runs = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        return [run["argv"] for run in runs if stub == "uv" or run["from_uv"]]

    def configure(self, base_url: str) -> None:
        """The client's configuration as README "Pointing an agent at it" gives it; base_url ends in /v1."""
        name = self.spec.name
        if name == "codex":
            (self.home / ".codex").mkdir(exist_ok=True)
            (self.home / ".codex" / "config.toml").write_text(
                f'model = "{MODEL}"\nmodel_provider = "allowlist-proxy"\n\n'
                f'[model_providers.allowlist-proxy]\nname = "allowlist-proxy"\nbase_url = "{base_url}"\n'
                'env_key = "ALLOWLIST_PROXY_KEY"\nwire_api = "responses"\n')
        elif name == "claude-code":
            (self.home / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))
        elif name == "cline":
            argv = [str(self.binary), "auth", "-p", "openai", "-k", "none", "-m", MODEL, "-b", base_url]
            done = subprocess.run(argv, cwd=self.project, env=self.env(base_url), capture_output=True, text=True,
                                  timeout=60, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                raise AssertionError(f"cline auth failed: {done.stdout}\n{done.stderr}")
        elif name == "continue":  # an OpenAI-compatible model of Continue's config.yaml
            (self.home / ".continue").mkdir(exist_ok=True)
            (self.home / ".continue" / "config.yaml").write_text(yaml.safe_dump({
                "name": "allowlist-proxy", "version": "1.0.0", "schema": "v1",
                "models": [{"name": MODEL, "provider": "openai", "model": MODEL, "apiBase": base_url,
                            "apiKey": "none", "roles": ["chat", "edit", "apply"]}]}, sort_keys=False))
        elif name == "kilo":  # Kilo reads OpenCode's provider config: docs/opencode.json as the project's kilo.json
            (self.project / "kilo.json").write_text(json.dumps(opencode_config(base_url), indent=2))

    def env(self, base_url: str) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TMPDIR")}
        env = {
            **keep, "HOME": str(self.home), "TERM": "dumb", "SHELL": "/bin/bash", "NO_COLOR": "1",
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "XDG_CONFIG_HOME": f"{self.home}/.config", "XDG_DATA_HOME": f"{self.home}/.local/share",
            "XDG_CACHE_HOME": f"{self.home}/.cache", "XDG_STATE_HOME": f"{self.home}/.local/state",
        }
        name = self.spec.name
        if name == "qwen-code":
            env.update(OPENAI_BASE_URL=base_url, OPENAI_API_KEY="none", OPENAI_MODEL=MODEL)
        elif name == "codex":
            env.update(ALLOWLIST_PROXY_KEY="none", CODEX_HOME=str(self.home / ".codex"))
        elif name == "kilo":  # nothing but the provider's baseURL: no catalogue fetches, updates or telemetry
            env.update({f"KILO_DISABLE_{what}": "1" for what in (
                "MODELS_FETCH", "AUTOUPDATE", "SHARE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS", "CLAUDE_CODE",
                "EXTERNAL_SKILLS", "CODEBASE_INDEXING", "SESSION_INGEST")}, KILO_TELEMETRY_LEVEL="off")
        elif name == "claude-code":
            env.update(ANTHROPIC_BASE_URL=base_url.removesuffix("/v1"), ANTHROPIC_API_KEY="none",
                       ANTHROPIC_MODEL=MODEL, ANTHROPIC_SMALL_FAST_MODEL=MODEL,
                       ANTHROPIC_DEFAULT_HAIKU_MODEL=MODEL, DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1",
                       CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_ERROR_REPORTING="1")
        return env

    def run(self, base_url: str, prompt: str, *, timeout: float = 150.0) -> ClientRun:
        returncode, stdout, stderr, seconds = run_cli(self.spec.argv(self, prompt), cwd=self.project,
                                                      env=self.env(base_url), timeout=timeout)
        run = ClientRun(-9 if returncode is None else returncode, stdout, stderr, seconds)
        if returncode is None:
            self.runs.append(run)
            raise AssertionError(f"{self.spec.name} did not finish in {timeout}s\n{run.describe()}")
        self.runs.append(run)
        return run


def describe_requests(requests: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(body, ensure_ascii=False)[:3000] for body in requests)
