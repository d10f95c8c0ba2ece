"""The log says what was blocked: each rejected call at `warning` (tool, command cut short, reasons, attempt,
session), blocked turns and upstream failures above `info`, an idle keep-alive close below it."""

from __future__ import annotations

from typing import Any

import pytest

from proxy import services
from proxy.http import connections
from proxy.store import recorder
from proxy.store.recorder import LOGGED_COMMAND_CHARS
from proxy.testing.characters import OPENCODE_TOOLS, bash_sequence, looping
from tests.conftest import chat


class RecordedLog:
    """Stands in for a module's structlog logger (cached at first use, so a test cannot re-point it): the lines it
    was given, each with its level."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def __getattr__(self, level: str) -> Any:
        def emit(event: str, **fields: Any) -> None:
            self.lines.append({"event": event, "level": level, **fields})
        return emit


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> RecordedLog:
    log = RecordedLog()
    for module in (services, recorder, connections):
        monkeypatch.setattr(module, "log", log)
    return log


def _ask(proxy):
    body = chat([{"role": "user", "content": "find docs"}], tools=OPENCODE_TOOLS)
    with proxy.client() as client:
        return client.post("/v1/chat/completions", json=body, headers={"x-session-id": "ses_logs"})


def test_a_recovered_turn_logs_every_rejected_call_at_warning(upstream, proxy, logged):
    upstream.responder = looping()
    assert _ask(proxy).status_code == 200
    lines = logged.lines
    rejected = [line for line in lines if line["event"] == "call.rejected"]
    assert [r["attempt"] for r in rejected] == [1, 2, 3]
    first = rejected[0]
    assert first["level"] == "warning" and first["tool"] == "bash" and first["session"] == "ses_logs"
    assert first["reasons"] == ["pipe"] and "| head -5" in first["command"]


def test_a_blocked_turn_is_a_warning_and_long_commands_are_cut(upstream, proxy, logged):
    long = "cat " + "x" * 5000 + " | head"
    upstream.responder = bash_sequence([long] * 10)
    assert _ask(proxy).status_code == 200
    lines = logged.lines
    request = next(line for line in lines if line["event"] == "request")
    assert request["outcome"] == "blocked" and request["level"] == "warning"
    assert all(len(r["command"]) <= LOGGED_COMMAND_CHARS for r in lines if r["event"] == "call.rejected")


def test_an_upstream_failure_is_a_warning(start_proxy, logged):
    proxy = start_proxy("http://127.0.0.1:9/v1")
    with proxy.client() as client:
        assert client.post("/v1/chat/completions", json=chat()).status_code == 502
    request = next(line for line in logged.lines if line["event"] == "request")
    assert request["outcome"] == "upstream_error" and request["level"] == "warning"


def test_an_idle_keep_alive_close_is_below_info_and_a_limit_hit_is_a_warning(logged):
    connections._last_logged.clear()
    connections._count("idle", "an idle keep-alive connection was closed")
    connections._count("header_timeout", "a client connection was closed: header timeout")
    assert [(line["limit"], line["level"]) for line in logged.lines] == [("idle", "debug"),
                                                                         ("header_timeout", "warning")]


