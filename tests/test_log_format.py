"""Human lines on a terminal, JSON for machines (`log_format: auto`, the default): `serve` and `demo` run under a
real pseudo-terminal and with their output piped; `serve` says its banner first and what starting found under
it; `demo --exit` prints its intro and tables, no log lines."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import structlog

from proxy.logs import renderer_for
from proxy.testing.server import free_port
from tests.conftest import ROOT, STRICT_POLICY

ANSI = re.compile(r"\x1b\[[0-9;]*m")
DEAD_UPSTREAM = "http://127.0.0.1:9/v1"  # nothing answers: `serve` finds a warning while it starts


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOWLIST_PROXY_") and k != "NO_COLOR"}
    return {**env, "TERM": "xterm", **extra}


def _serve_argv(tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "proxy", "serve", "--port", str(free_port()), "--upstream", DEAD_UPSTREAM,
            "--db", f"sqlite:///{tmp_path / 'log.db'}", "--policy", str(STRICT_POLICY), *extra]


def in_terminal(argv: list[str], *, until: str | None, env: dict[str, str], timeout: float = 90.0) -> str:
    """Runs `argv` with a pseudo-terminal as its stdin, stdout and stderr; returns what the terminal showed, once
    `until` appeared (then the process gets SIGTERM) or the process ended."""
    main, child = pty.openpty()
    proc = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, cwd=ROOT, env=env, close_fds=True,
                            start_new_session=True)
    os.close(child)
    shown = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the terminal closed: the process ended
                    break
                if not chunk:
                    break
                shown += chunk
            text = ANSI.sub("", shown.decode(errors="replace"))
            if until is not None and until in text:
                time.sleep(0.3)  # whatever follows at once
                with_rest = _drain(main)
                shown += with_rest
                break
            if until is None and proc.poll() is not None and not ready:
                break
        else:
            pytest.fail(f"{until!r} did not appear in {timeout} s: {shown.decode(errors='replace')[-2000:]}")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        os.close(main)
    return shown.decode(errors="replace").replace("\r\n", "\n")


def _drain(fd: int) -> bytes:
    out = b""
    while select.select([fd], [], [], 0.1)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out


def _json_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("{")]


def test_serve_on_a_terminal_prints_human_lines_under_its_banner(tmp_path: Path):
    shown = in_terminal(_serve_argv(tmp_path), until="vllm_version.unknown", env=_env())
    plain = ANSI.sub("", shown)
    assert plain.startswith("allowlist-proxy "), plain[:300]  # the banner first: nothing logged above it
    banner_end = plain.index("  store ")
    warning = plain.index("vllm_version.unknown")
    assert warning > banner_end
    assert _json_lines(plain) == [], plain
    line = next(line for line in plain.splitlines() if "vllm_version.unknown" in line)
    assert "warning" in line and "hint=" in line  # structlog's console line: level, event, key=value
    assert "\x1b[" in shown  # in colour on a terminal


def test_serve_piped_logs_json_after_its_banner(tmp_path: Path):
    proc = subprocess.Popen(_serve_argv(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                            env=_env(), text=True)
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if '"proxy.started"' in line:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert lines and lines[0].startswith("allowlist-proxy "), lines[:3]
    first_json = next(i for i, line in enumerate(lines) if line.startswith("{"))
    assert all(not line.startswith("{") for line in lines[:first_json])  # the banner, whole, then the log
    events = [json.loads(line)["event"] for line in lines[first_json:]]  # every log line is one JSON object
    assert "vllm_version.unknown" in events and events[-1] == "proxy.started"


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_an_explicit_format_wins_over_where_the_log_goes(tmp_path: Path, fmt: str):
    shown = ANSI.sub("", in_terminal(_serve_argv(tmp_path, "--log-format", fmt), until="vllm_version.unknown",
                                     env=_env()))
    warning = next(line for line in shown.splitlines() if "vllm_version.unknown" in line)
    assert warning.startswith("{") is (fmt == "json"), warning
    if fmt == "console":  # asked for by name: no colour, it may go to a file
        raw = in_terminal(_serve_argv(tmp_path, "--log-format", fmt), until="vllm_version.unknown", env=_env())
        assert "\x1b[" not in raw


def test_demo_prints_its_intro_and_tables_only(tmp_path: Path):
    argv = [sys.executable, "-m", "proxy", "demo", "--exit", "--port", "0", "--duration", "0", "--sessions", "1",
            "--db", f"sqlite:///{tmp_path / 'demo.db'}"]
    shown = ANSI.sub("", in_terminal(argv, until=None, env=_env()))
    piped = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=120)
    assert piped.returncode == 0, piped.stderr
    for output in (shown, piped.stdout + piped.stderr):
        assert output.lstrip().startswith("proxy on http://127.0.0.1:"), output[:300]
        assert "call.rejected" not in output and _json_lines(output) == [], output
        assert "Err/tool" in output and "/dashboard" in output


def test_auto_reads_the_stream_it_writes_to(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    assert isinstance(renderer_for("auto"), structlog.dev.ConsoleRenderer)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert isinstance(renderer_for("auto"), structlog.processors.JSONRenderer)
    assert isinstance(renderer_for("console"), structlog.dev.ConsoleRenderer)
    assert isinstance(renderer_for("json"), structlog.processors.JSONRenderer)
