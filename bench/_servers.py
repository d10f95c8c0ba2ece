"""Starts the scripted upstream and the proxy as separate processes, as in production."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from proxy.testing.server import free_port

__all__ = ["ROOT", "Servers", "free_port", "rss_mb", "stop_processes", "wait_ready"]

ROOT = Path(__file__).resolve().parents[1]

UPSTREAM_SCRIPT = """
import sys, uvicorn
from proxy.testing.scripted_upstream import ScriptedUpstream, Reply
chunks = int(sys.argv[2])
tool = sys.argv[3] == "1"
calls = [("bash", {"command": 'uv run scripts/search.py "rust async"'})] if tool else []
up = ScriptedUpstream(models=["qwen3.5-27b"], responder=lambda body: Reply(
    content="x" * chunks, content_chunk=1, completion_tokens=chunks, tool_calls=calls))
uvicorn.run(up.app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error", access_log=False)
"""


def wait_ready(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(url)


class Servers:
    def __init__(self, *, chunks: int = 200, policy: str = "policies/strict.yaml", tool_call: bool = False) -> None:
        self.chunks = chunks
        self.tool_call = tool_call
        self.policy = policy
        self.procs: list[subprocess.Popen[bytes]] = []
        self.tmp = tempfile.TemporaryDirectory()

    def __enter__(self) -> Servers:
        up_port, proxy_port = free_port(), free_port()
        self.upstream = f"http://127.0.0.1:{up_port}/v1"
        self.proxy = f"http://127.0.0.1:{proxy_port}/v1"
        self.procs.append(subprocess.Popen([sys.executable, "-c", UPSTREAM_SCRIPT, str(up_port), str(self.chunks),
                                            "1" if self.tool_call else "0"],
                                           cwd=ROOT))
        env = {**os.environ, "ALLOWLIST_PROXY_LOG_LEVEL": "warning"}
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "proxy", "serve", "--port", str(proxy_port), "--upstream", self.upstream,
             "--db", f"sqlite:///{self.tmp.name}/bench.db", "--policy", self.policy, "--log-level", "warning"],
            cwd=ROOT, env=env, stderr=subprocess.DEVNULL))
        wait_ready(self.upstream.removesuffix("/v1") + "/health")
        wait_ready(self.proxy.removesuffix("/v1") + "/health")
        return self

    @property
    def proxy_pid(self) -> int:
        return self.procs[1].pid

    def __exit__(self, *exc: object) -> None:
        stop_processes(self.procs)
        self.tmp.cleanup()


def stop_processes(procs: list[subprocess.Popen] | tuple[subprocess.Popen, ...], wait: float = 15.0) -> None:
    """SIGTERM to every process at once (they stop side by side), then each waited for; SIGKILL past `wait`."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")
