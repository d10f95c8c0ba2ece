"""Runs the real OpenCode CLI headless in a throw-away world: its own HOME, a project with a
`scripts/` folder, a stub `uv` first on PATH that records what the shell really ran, and a
provider config that points OpenCode at a base URL (the proxy, or the scripted upstream).

OpenCode is installed outside the repository by `scripts/install-opencode.sh`; the binary is
looked up in `$OPENCODE_BIN`, then in `${OPENCODE_CACHE:-~/.cache/allowlist-proxy-e2e}`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DOCS_CONFIG",
    "OPENCODE_SERIES",
    "OpenCodeRun",
    "OpenCodeWorld",
    "find_opencode",
    "opencode_config",
]

OPENCODE_SERIES = "1.18."  # the client docs/peers.md measured; scripts/install-opencode.sh pins the patch
DOCS_CONFIG = Path(__file__).resolve().parents[2] / "docs" / "opencode.json"
PROVIDER = "allowlist-proxy"  # the provider id in docs/opencode.json

_SCRIPTS = {
    "search.py": 'import sys\nprint("results for", " ".join(sys.argv[1:]))\n',
    "fetch_page.py": 'import sys\nprint("page", sys.argv[1:])\n',
    "summarize.py": 'print("summary")\n',
}

# The stub prints a line the tests can look for in the tool result OpenCode sends back.
_UV_STUB = """#!{python}
import json, sys
with open({log!r}, "a", encoding="utf-8") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
print("STUB-UV ran: " + " ".join(sys.argv[1:]))
"""


def default_cache() -> Path:
    return Path(os.environ.get("OPENCODE_CACHE") or Path.home() / ".cache" / "allowlist-proxy-e2e")


def find_opencode() -> tuple[Path | None, str]:
    """The OpenCode binary and its version, or None and why not."""
    candidates = []
    if os.environ.get("OPENCODE_BIN"):
        candidates.append(Path(os.environ["OPENCODE_BIN"]))
    candidates.append(default_cache() / "node_modules" / ".bin" / "opencode")
    for path in candidates:
        if not path.exists():
            continue
        try:
            with tempfile.TemporaryDirectory() as home:  # even --version writes state under HOME
                out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60,
                                     env={**os.environ, "HOME": home, "XDG_CONFIG_HOME": f"{home}/.config",
                                          "XDG_DATA_HOME": f"{home}/.local/share",
                                          "XDG_CACHE_HOME": f"{home}/.cache",
                                          "XDG_STATE_HOME": f"{home}/.local/state"})
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{path} does not run: {exc}"
        version = out.stdout.strip()
        if not version.startswith(OPENCODE_SERIES) and os.environ.get("E2E_ANY_VERSION") != "1":
            return None, f"{path} is OpenCode {version!r}, the suite needs {OPENCODE_SERIES}x"
        return path, version
    return None, ("OpenCode 1.18 not found (looked in $OPENCODE_BIN and "
                  f"{candidates[-1]}): run scripts/install-opencode.sh")


def opencode_config(base_url: str, *, permission: dict[str, Any] | None = None) -> dict[str, Any]:
    """docs/opencode.json with its baseURL replaced: the tests run the config users copy."""
    config = copy.deepcopy(json.loads(DOCS_CONFIG.read_text()))
    config["provider"][PROVIDER]["options"]["baseURL"] = base_url
    if permission is not None:
        config["permission"] = permission
    return config


@dataclass
class OpenCodeRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def session_ids(self) -> set[str]:
        return {e["sessionID"] for e in self.events if isinstance(e.get("sessionID"), str)}

    @property
    def text(self) -> str:
        """Everything OpenCode printed as assistant text."""
        return "".join(e["part"].get("text", "") for e in self.events
                       if e.get("type") == "text" and isinstance(e.get("part"), dict))

    def tool_parts(self) -> list[dict[str, Any]]:
        return [e["part"] for e in self.events
                if e.get("type") == "tool_use" and isinstance(e.get("part"), dict)]

    def describe(self) -> str:
        return (f"exit {self.returncode} after {self.seconds:.1f}s\n--- stdout\n{self.stdout[-4000:]}\n"
                f"--- stderr\n{self.stderr[-6000:]}")


class OpenCodeWorld:
    """A fresh HOME, a project directory and a recording `uv`, under `root`."""

    model = "qwen3.5-27b"

    def __init__(self, root: Path, binary: Path) -> None:
        self.root = root
        self.binary = binary
        self.home = root / "home"
        self.project = root / "project"
        self.bin = root / "bin"
        self.uv_log = root / "uv-calls.jsonl"
        self.runs: list[OpenCodeRun] = []
        for folder in (self.home, self.project / "scripts", self.bin):
            folder.mkdir(parents=True, exist_ok=True)
        for name, text in _SCRIPTS.items():
            (self.project / "scripts" / name).write_text(text)
        (self.project / "notes.txt").write_text("NOTES-MARKER: the relative read went through\n")
        self._skip_plugin_install()
        uv = self.bin / "uv"
        uv.write_text(_UV_STUB.format(python=sys.executable, log=str(self.uv_log)))
        uv.chmod(0o755)

    def _skip_plugin_install(self) -> None:
        # OpenCode 1.18 npm-installs @opencode-ai/plugin into its config directory in the
        # background on every start unless node_modules exists and the lock file lists it: seed
        # both, so a run talks to nothing but its provider's baseURL.
        config_dir = self.home / ".config" / "opencode"
        (config_dir / "node_modules").mkdir(parents=True, exist_ok=True)
        lock = {"lockfileVersion": 3, "packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}
        (config_dir / "package-lock.json").write_text(json.dumps(lock))

    def configure(self, base_url: str, *, permission: dict[str, Any] | None = None) -> dict[str, Any]:
        config = opencode_config(base_url, permission=permission)
        (self.project / "opencode.json").write_text(json.dumps(config, indent=2))
        return config

    def uv_calls(self) -> list[list[str]]:
        if not self.uv_log.exists():
            return []
        return [json.loads(line) for line in self.uv_log.read_text().splitlines() if line.strip()]

    def env(self) -> dict[str, str]:
        home = str(self.home)
        keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TERM", "TMPDIR")}
        return {
            **keep,
            "HOME": home,
            "XDG_CONFIG_HOME": f"{home}/.config",
            "XDG_DATA_HOME": f"{home}/.local/share",
            "XDG_CACHE_HOME": f"{home}/.cache",
            "XDG_STATE_HOME": f"{home}/.local/state",
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "SHELL": "/bin/bash",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            # Nothing but the provider's baseURL: no plugin installs, LSP downloads, shares or
            # skills picked up from the machine.
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_CLAUDE_CODE": "1",
            "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
        }

    def run(self, prompt: str, *, timeout: float = 120.0) -> OpenCodeRun:
        argv = [str(self.binary), "run", "--pure", "--format", "json", "--print-logs", "--log-level", "INFO",
                "-m", f"{PROVIDER}/{self.model}", prompt]
        returncode, stdout, stderr, seconds = run_cli(argv, cwd=self.project, env=self.env(), timeout=timeout)
        if returncode is None:
            run = OpenCodeRun(-9, stdout, stderr, seconds)
            self.runs.append(run)
            raise AssertionError(f"OpenCode did not finish in {timeout}s\n{run.describe()}")
        events = []
        for line in stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    events.append(json.loads(line))
        run = OpenCodeRun(returncode, stdout, stderr, seconds, events)
        self.runs.append(run)
        return run


def run_cli(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str, str, float]:
    """Runs an agent CLI to its end: (exit code, stdout, stderr, seconds); the code is None when it ran past
    `timeout`. A session of its own, so a timeout takes down the client's shells too."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        return None, stdout, stderr, time.monotonic() - started
    finally:
        _end_left_behind(proc.pid, cwd)
    return proc.returncode, stdout, stderr, time.monotonic() - started


def _end_left_behind(group: int, cwd: Path) -> None:
    """What the client left running when it exited: its session's processes, and daemons that started a session of
    their own for this run's project (Cline's hub daemon names it in its arguments), so none outlives the test."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)
    project = str(cwd.resolve())
    if not project.startswith(str(Path(tempfile.gettempdir()).resolve()) + os.sep):
        return  # only a run's own scratch project marks its daemons
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError, ValueError):
            args = (entry / "cmdline").read_bytes().decode().split("\0")
            if any(arg == project or arg.startswith(project + os.sep) for arg in args):
                os.kill(int(entry.name), signal.SIGKILL)
