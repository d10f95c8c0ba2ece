"""Sessions as the clients make them, and the tool profiles each request is judged through, across the proxy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.testing.scripted_upstream import Reply
from tests.conftest import chat

pytestmark = pytest.mark.each_database

CLIENTS = Path(__file__).parent / "policy" / "client_tools"
QWEN = json.loads((CLIENTS / "qwen-code.json").read_text())


def _sessions(proxy) -> list[str]:
    return [r[0] for r in proxy.rows("SELECT session_id FROM requests ORDER BY started_at")]


def test_conversations_that_begin_alike_are_separate_sessions(upstream, proxy):
    """Five runs of one scripted agent send the same first messages: five sessions, not one."""
    first = [{"role": "system", "content": "You are a coder."}, {"role": "user", "content": "same task"}]
    upstream.script(*(Reply(content=f"answer {i}") for i in range(5)))
    with proxy.client() as client:
        for _ in range(5):
            client.post("/v1/chat/completions", json=chat(first))
    runs = _sessions(proxy)
    assert len(set(runs)) == 5
    # A request that extends a conversation with the reply the proxy delivered continues that session.
    follow = [*first, {"role": "assistant", "content": "answer 2"}, {"role": "user", "content": "go on"}]
    with proxy.client() as client:
        client.post("/v1/chat/completions", json=chat(follow, stream=True))
    assert _sessions(proxy)[-1] == runs[2]
    # A subagent forking the conversation under instructions of its own (Qwen Code's memory extraction)
    # continues it too: instructions are not the conversation.
    fork = [{"role": "system", "content": "You extract memories."}, *follow[1:3], {"role": "user", "content": "m"}]
    with proxy.client() as client:
        client.post("/v1/chat/completions", json=chat(fork))
    assert _sessions(proxy)[-1] == runs[2]
    # One that carries a reply the proxy never delivered does not.
    forged = [*first, {"role": "assistant", "content": "made up"}, {"role": "user", "content": "go on"}]
    with proxy.client() as client:
        client.post("/v1/chat/completions", json=chat(forged))
    assert _sessions(proxy)[-1] not in runs


def test_the_clients_session_headers_are_read_by_default(upstream, proxy):
    sent = [{"x-session-id": "ses_open"}, {"x-claude-code-session-id": "claude-1"}, {"session-id": "codex-1"},
            {"session-id": "codex-1", "x-session-id": "ses_first"}]
    with proxy.client() as client:
        for headers in sent:
            client.post("/v1/chat/completions", json=chat(), headers=headers)
    assert _sessions(proxy) == ["ses_open", "claude-1", "codex-1", "ses_first"]
    assert proxy.rows("SELECT count(*) FROM session_lineage")[0][0] == 0


def test_session_header_setting_is_a_list(upstream, start_proxy):
    proxy = start_proxy(upstream.url, session_header=["x-run-id", "x-session-id"])
    with proxy.client() as client:
        client.post("/v1/chat/completions", json=chat(), headers={"x-run-id": "run-7"})
        client.post("/v1/chat/completions", json=chat(), headers={"session-id": "not-read"})
    sessions = _sessions(proxy)
    assert sessions[0] == "run-7" and sessions[1].startswith("lin_")


def test_the_chosen_profile_is_recorded_and_shown(upstream, proxy):
    upstream.script(Reply(tool_calls=[("run_shell_command", {"command": "uv run scripts/search.py x | head -5"})]),
                    Reply(tool_calls=[("run_shell_command", {"command": "uv run scripts/search.py x"})]))
    body = chat(tools=QWEN["tools"])
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=body, headers={"user-agent": QWEN["user_agent"]})
        (call,) = response.json()["choices"][0]["message"]["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == {"command": "uv run scripts/search.py x"}
        (row,) = proxy.rows("SELECT session_id, profiles FROM requests")
        assert row["profiles"] == "qwen-code"
        detail = client.get(f"/stats/sessions/{row['session_id']}").json()
    assert detail["profiles"] == ["qwen-code"]
    assert [c["reasons"] for c in detail["calls"]] == [["pipe"], []]
    assert detail["calls"][0]["command"] == "uv run scripts/search.py x | head -5"


def test_requests_whose_tools_nothing_governs_are_counted(upstream, proxy):
    lookup = {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}}}}

    def counted(client) -> float:  # the registry is the process's: count what this test adds
        lines = client.get("/metrics").text.splitlines()
        return sum(float(x.rsplit(" ", 1)[1]) for x in lines
                   if x.startswith("allowlist_proxy_ungoverned_requests_total{"))

    with proxy.client() as client:
        before = counted(client)
        for _ in range(2):
            client.post("/v1/chat/completions", json=chat(tools=[lookup]), headers={"x-session-id": "ses_u"})
        client.post("/v1/chat/completions", json=chat(tools=QWEN["tools"]), headers={"x-session-id": "ses_u"})
        client.post("/v1/chat/completions", json=chat(), headers={"x-session-id": "ses_u"})  # no tools offered
        assert counted(client) - before == 2
    assert proxy.rows("SELECT profiles FROM requests ORDER BY started_at")[0][0] is None


def test_project_root_from_the_named_header(upstream, start_proxy):
    proxy = start_proxy(upstream.url, project_root_header="x-project-root")
    upstream.script(Reply(tool_calls=[("read_file", {"file_path": "/etc/passwd"})]),
                    Reply(tool_calls=[("read_file", {"file_path": "/srv/app/README.md"})]))
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat(tools=QWEN["tools"]),
                               headers={"x-project-root": "/srv/app"})
    (call,) = response.json()["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"file_path": "/srv/app/README.md"}
    rows = proxy.rows("SELECT tool_name, decision, reasons, delivered FROM tool_calls ORDER BY created_at")
    assert [tuple(r) for r in rows] == [("read_file", "reject", "absolute_path", 0), ("read_file", "allow", "", 1)]
    # The retry told the model about paths, naming the tool, not about which commands may run.
    feedback = upstream.requests[1]["messages"][-1]["content"]
    assert "`read_file`" in feedback and "uv run" not in feedback


def test_serve_flags_name_session_headers_and_the_root_header():
    import argparse

    from proxy.cli import serve

    parser = argparse.ArgumentParser()
    serve.register(parser.add_subparsers())
    args = parser.parse_args(["serve", "--session-header", "X-Run-Id,x-session-id",
                              "--project-root-header", "x-project-root"])
    settings = serve.settings_from(args)
    assert settings.policy.session_header == ["x-run-id", "x-session-id"]
    assert settings.policy.project_root_header == "x-project-root"
