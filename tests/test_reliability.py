"""Load, faults and bad input: every request recorded exactly once, clear errors, never a crash."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import httpx
import pytest

from proxy.testing.characters import OPENCODE_TOOLS, switching
from proxy.testing.scripted_upstream import Reply
from proxy.testing.server import free_port
from tests.conftest import ROOT, STRICT_POLICY, chat, sse_json, wait_until

pytestmark = pytest.mark.each_database

ALLOWED = 'uv run scripts/search.py "rust async"'


def _responder(body):
    """Sessions named `...-loop-...` are refused once first; the others comply at once."""
    session_kind = body["messages"][0]["content"]
    if "switch" in session_kind:
        return switching()(body)
    return Reply(content="ok ", tool_calls=[("bash", {"command": ALLOWED})], content_chunk=3)


async def _drive(url: str, sessions: int) -> list[int]:
    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        async def one(i: int) -> int:
            kind = "switch" if i % 2 else "comply"
            body = chat([{"role": "user", "content": f"{kind} task {i}"}], tools=OPENCODE_TOOLS, stream=True)
            response = await client.post("/v1/chat/completions", json=body, headers={"x-session-id": f"ses_{i}"})
            calls = [d for c in sse_json(response.content) for ch in c["choices"]
                     for d in ch["delta"].get("tool_calls") or []]
            assert response.content.endswith(b"data: [DONE]\n\n")
            assert [json.loads(c["function"]["arguments"])["command"] for c in calls] == [ALLOWED]
            return response.status_code

        return await asyncio.gather(*(one(i) for i in range(sessions)))


@pytest.mark.slow
def test_two_hundred_concurrent_streaming_sessions_lose_and_duplicate_nothing(upstream, proxy):
    upstream.responder = _responder
    statuses = asyncio.run(_drive(proxy.url, 200))
    assert statuses == [200] * 200
    assert proxy.rows("SELECT count(*), count(DISTINCT id), count(DISTINCT session_id) FROM requests")[0] == (
        200, 200, 200)
    calls = proxy.rows("SELECT decision, count(*) FROM tool_calls GROUP BY decision ORDER BY decision")
    assert [tuple(r) for r in calls] == [("allow", 200), ("reject", 100)]
    assert proxy.rows("SELECT count(*) FROM tool_call_reasons")[0][0] == 100
    assert proxy.rows("SELECT sum(attempts) FROM requests")[0][0] == 300


def test_megabyte_tool_arguments_get_a_verdict_not_a_crash(upstream, proxy):
    huge = "uv run scripts/search.py " + "a" * 2_000_000
    upstream.script(Reply(tool_calls=[("bash", {"command": huge})], arguments_chunk=65536),
                    Reply(tool_calls=[("write", {"filePath": "notes.md", "content": "x" * 1_500_000})],
                          arguments_chunk=65536))
    body = chat([{"role": "user", "content": "go"}], tools=OPENCODE_TOOLS, stream=True)
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=body)
    deltas = [d for c in sse_json(response.content) for ch in c["choices"] for d in ch["delta"].get("tool_calls") or []]
    assert [d["function"]["name"] for d in deltas] == ["write"]
    assert len(json.loads(deltas[0]["function"]["arguments"])["content"]) == 1_500_000
    rows = proxy.rows("SELECT tool_name, decision, primary_reason FROM tool_calls ORDER BY attempt")
    assert [tuple(r) for r in rows] == [("bash", "reject", "unsafe_text"), ("write", "allow", None)]


@pytest.mark.parametrize("body", [b"", b"null", b'{"model": "qwen3.5-27b", "messages": "hi"}',
                                  b'{"model": "qwen3.5-27b", "messages": [], "stream": true}',
                                  b'\xc3\x28{"model": 1}', b'{"model": "qwen3.5-27b", "messages": [1, 2]}'])
def test_bad_input_is_a_clear_error(proxy, body):
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", content=body)
    assert response.status_code in (400, 502), response.text
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.slow
def test_sqlite_locked_by_another_process_delays_rows_but_not_responses(upstream, start_proxy, backend):
    if backend != "sqlite":
        pytest.skip("a file lock is SQLite's")
    proxy = start_proxy(upstream.url)
    with proxy.client() as client:
        client.post("/v1/chat/completions", json=chat())  # the schema exists, the writer is warm
    proxy.flush()
    locker = sqlite3.connect(proxy.db_url.removeprefix("sqlite:///"), timeout=1, isolation_level=None,
                             check_same_thread=False)
    locker.execute("BEGIN EXCLUSIVE")
    released = threading.Event()

    def release_later() -> None:
        time.sleep(5)
        locker.execute("COMMIT")
        locker.close()
        released.set()

    threading.Thread(target=release_later, daemon=True).start()
    started = time.monotonic()
    with proxy.client() as client:
        for i in range(10):
            assert client.post("/v1/chat/completions", json=chat(), headers={"x-session-id": f"ses_l{i}"}
                               ).status_code == 200
        assert time.monotonic() - started < 4, "responses waited on the locked store"
        metrics = client.get("/metrics").text
    depth = [line for line in metrics.splitlines() if line.startswith("allowlist_proxy_store_queue_depth")]
    assert depth and float(depth[0].split()[-1]) > 0
    assert released.wait(10)
    assert wait_until(lambda: proxy.rows("SELECT count(*) FROM requests")[0][0] == 11, timeout=20)


def test_half_written_policy_during_load_keeps_the_last_good_one(upstream, start_proxy, tmp_path):
    policy = tmp_path / "strict.yaml"
    good = STRICT_POLICY.read_text()
    policy.write_text(good)
    proxy = start_proxy(upstream.url, policy=policy)
    upstream.responder = lambda body: Reply(tool_calls=[("bash", {"command": ALLOWED + " | head -5"})]) \
        if "pipe" in body["messages"][0]["content"] else Reply(content="fine")
    with proxy.client() as client:
        policy.write_text(good[: len(good) // 2] + "\n  bad: [unclosed\n")
        assert wait_until(lambda: client.get("/policies").json()["errors"], timeout=10)
        for _ in range(5):
            body = chat([{"role": "user", "content": "pipe please"}], tools=OPENCODE_TOOLS)
            message = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
            assert not message["tool_calls"] and "pipe" in message["content"]
        status = client.get("/policies").json()
    assert status["active"]["name"] == "strict-uv-scripts"
    assert status["errors"][0]["file"].endswith("strict.yaml")


@pytest.mark.slow
def test_sigterm_under_load_finishes_streams_and_flushes_every_row(upstream, tmp_path):
    db = tmp_path / "sigterm.db"
    port = free_port()
    env = {**os.environ, "ALLOWLIST_PROXY_LOG_LEVEL": "warning"}
    proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream", upstream.url,
                             "--db", f"sqlite:///{db}", "--policy", str(STRICT_POLICY)], cwd=ROOT, env=env,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: _up(url), timeout=30)
        upstream.responder = lambda body: Reply(content="y" * 60, content_chunk=3, chunk_delay=0.05)

        async def load() -> list[bytes]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:
                async def one(i: int) -> bytes:
                    response = await client.post("/v1/chat/completions", json=chat(stream=True),
                                                 headers={"x-session-id": f"ses_t{i}"})
                    return response.content

                tasks = [asyncio.create_task(one(i)) for i in range(20)]
                await asyncio.sleep(0.4)
                proc.send_signal(signal.SIGTERM)
                return await asyncio.gather(*tasks)

        bodies = asyncio.run(load())
        assert proc.wait(40) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once shut down
    finally:
        if proc.poll() is None:
            proc.kill()
    for body in bodies:
        assert body.endswith(b"data: [DONE]\n\n")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM requests").fetchone()[0] == 20


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
