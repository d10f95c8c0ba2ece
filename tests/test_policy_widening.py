"""The served policy is not the agent's to change: a live reload that widens what is allowed is held
(reported in /policies and the log), the old policy still judging, until the operator sends SIGHUP; a
narrowing one applies at once; `check --reload-against` reaches the same verdict as the live reload."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from proxy.testing.scripted_upstream import Reply
from proxy.testing.server import free_port
from tests.conftest import ROOT, STRICT_POLICY, chat, wait_until

BASH = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
WIDE_COMMAND = "uv run scripts/extra.py"


def _settled(path: Path, text: str) -> None:
    path.write_text(text)
    old = time.time() - 5  # the reload does not wait for a settled file to hold still
    os.utime(path, (old, old))


def _widened(text: str) -> str:
    head, sep, tail = text.partition("\n  scripts:")
    line, newline, rest = tail.partition("\n")
    assert sep and newline
    return head + sep + line + "\n    extra: {}\n" + rest


def _check_reload(served: Path, edited: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "proxy", "check", "--reload-against", str(served),
                          "--policy", str(edited)], capture_output=True, text=True, cwd=ROOT, check=False)
    return json.loads(out.stdout.splitlines()[0])


def _delivered(proxy_url: str, upstream, session: str) -> str:
    upstream.script(Reply(tool_calls=[("bash", {"command": WIDE_COMMAND})]),
                    Reply(tool_calls=[("bash", {"command": 'uv run scripts/search.py "x"'})]))
    response = httpx.post(proxy_url + "/v1/chat/completions", json=chat(tools=BASH),
                          headers={"x-session-id": session}, timeout=30)
    assert response.status_code == 200, response.text
    return json.loads(response.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])["command"]


def test_widening_reload_is_held_until_sighup(upstream, start_proxy, tmp_path: Path):
    policy = tmp_path / "served.yaml"
    text = STRICT_POLICY.read_text()
    _settled(policy, text)
    proxy = start_proxy(upstream.url, policy=policy)
    manager = proxy.services.policies
    served = manager.current().hash
    (tmp_path / "scripts").mkdir()
    _settled(policy, _widened(text))
    assert _check_reload(STRICT_POLICY, policy)["reload"] == "hold"
    assert manager.reload() is False and manager.current().hash == served  # what the watcher does
    with proxy.client() as http:
        held = http.get("/policies").json()["held"]
    assert len(held) == 1 and "SIGHUP" in held[0]["reason"]
    assert _delivered(proxy.url, upstream, "ses_w1") != WIDE_COMMAND  # the old policy still judges
    manager.apply_held()  # what SIGHUP runs
    assert manager.current().hash != served
    with proxy.client() as http:
        assert http.get("/policies").json()["held"] == []
    # A narrowing edit applies live, and check says so too.
    narrowed = _widened(text).replace("    extra: {}\n", "")
    assert narrowed == text
    before = tmp_path / "before.yaml"
    before.write_text(_widened(text))
    _settled(policy, narrowed)
    assert _check_reload(before, policy)["reload"] == "apply"
    assert manager.reload() is True


def test_real_sighup_applies_the_held_edit(upstream, tmp_path: Path):
    policy = tmp_path / "served.yaml"
    text = STRICT_POLICY.read_text()
    _settled(policy, text)
    port = free_port()
    env = {**os.environ, "ALLOWLIST_PROXY_LOG_LEVEL": "error"}
    proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream", upstream.url,
                             "--db", f"sqlite:///{tmp_path / 'p.db'}", "--policy", str(policy)], cwd=ROOT, env=env,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        def status() -> dict:
            try:
                return httpx.get(url + "/policies", timeout=1).json()
            except (httpx.HTTPError, ValueError):
                return {}

        assert wait_until(lambda: bool(status()), timeout=60), "the proxy did not start"
        first = status()["active"]["hash"]
        _settled(policy, _widened(text))
        assert wait_until(lambda: bool(status().get("held")), timeout=30), status()
        assert status()["active"]["hash"] == first
        proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: status()["active"]["hash"] != first, timeout=30), status()
        assert status()["held"] == [] and proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
