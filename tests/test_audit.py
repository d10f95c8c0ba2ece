"""Audit before release: no call reaches a client before it is on record, and no store fault stops the record.

Each fault of issue 16 is one test here, on SQLite and Postgres where both apply.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.store import tables
from proxy.store.db import create_engine, migrate
from proxy.store.safe_text import CUT_MARKER
from proxy.store.writer import StoreWriter
from proxy.testing.characters import OPENCODE_TOOLS
from proxy.testing.scripted_upstream import Reply
from proxy.testing.server import ServerThread
from tests.conftest import MODEL, chat, wait_until

pytestmark = pytest.mark.each_database

ALLOWED = 'uv run scripts/search.py "rust async"'


def _request_row(i: int, **extra: Any) -> dict[str, Any]:
    return {"id": f"req{i}", "session_id": "ses_w", "model": MODEL, "route": "chat", "upstream": "u", "stream": False,
            "started_at": time.time(), "status": 200, "outcome": "ok", "concurrency": 1, "attempts": 1,
            "budget_exhausted": False, **extra}


def _call_row(i: int, **extra: Any) -> dict[str, Any]:
    return {"id": f"call{i}", "request_id": f"req{i}", "session_id": "ses_w", "model": MODEL, "route": "chat",
            "attempt": 1, "call_index": 0, "created_at": time.time(), "tool_name": "bash", "source": "openai",
            "arguments_raw": "{}", "decision": "allow", "reasons": "", "delivered": True, **extra}


async def _with_writer(url: str, body: Any, **options: Any) -> Any:
    engine = create_engine(url)
    await migrate(engine)
    writer = StoreWriter(engine, **options)
    await writer.start()
    try:
        return await body(engine, writer)
    finally:
        await writer.stop(5)
        await engine.dispose()


def test_bad_rows_are_isolated_and_stored_made_safe(db_url, backend):
    """A NUL byte and a 300-character model name (Postgres refuses both) block nothing and are kept."""
    async def body(engine, writer):
        writer.put(tables.requests, _request_row(0, model="m" * 300))
        writer.put(tables.requests, _request_row(1))
        writer.put(tables.tool_calls, _call_row(1, arguments_raw='{"command": "a\x00b"}', command="a\x00b"))
        for i in range(2, 22):
            writer.put(tables.requests, _request_row(i))
        await writer.commit(20)
        async with engine.connect() as conn:
            requests = (await conn.execute(text("SELECT count(*) FROM requests"))).scalar()
            model = (await conn.execute(text("SELECT model FROM requests WHERE id = 'req0'"))).scalar()
            command = (await conn.execute(text("SELECT command FROM tool_calls"))).scalar()
        return requests, model, command, writer.health(), writer.rows_lost

    requests, model, command, health, lost = asyncio.run(_with_writer(db_url, body, flush_seconds=0.01))
    assert (requests, health, lost) == (22, None, 0)
    if backend == "postgres":
        assert command == "a\\x00b" and len(model) == 256 and model.endswith(CUT_MARKER)
    else:
        assert command == "a\x00b" and model == "m" * 300


def test_commit_is_prompt_and_flush_seconds_bounds_an_unawaited_row(db_url):
    async def body(engine, writer):
        writer.put(tables.requests, _request_row(0))
        await writer.commit(5)  # the first transaction opens the connection
        started = time.perf_counter()
        writer.put(tables.requests, _request_row(1))
        await writer.commit(5)  # urgent: not the 0.3 s gathering time
        waited = time.perf_counter() - started
        writer.put(tables.requests, _request_row(2))
        await asyncio.sleep(0.8)
        async with engine.connect() as conn:
            stored = (await conn.execute(text("SELECT count(*) FROM requests"))).scalar()
        return waited, stored

    waited, stored = asyncio.run(_with_writer(db_url, body, flush_seconds=0.3))
    assert waited < 0.2 and stored == 3


def test_a_full_queue_drops_rows_counted_and_degrades_health(tmp_path):
    async def body(engine, writer):
        writer.failing = "held for the test"  # nothing is written while the queue fills
        writer.put_many([(tables.requests, _request_row(i)) for i in range(5)])
        return writer.depth, writer.rows_lost, writer.accepting

    depth, lost, accepting = asyncio.run(_with_writer(f"sqlite:///{tmp_path / 'q.db'}", body, max_queue=3))
    assert (depth, lost, accepting) == (3, 2, False)


# ------------------------------------------------------------------ through the proxy


def _rows_now(proxy, sql: str) -> list[Any]:
    """Rows as committed right now: no flush of the writer first (unlike proxy.rows)."""
    async def query():
        async with proxy.services.engine.connect() as conn:
            return [tuple(r) for r in await conn.execute(text(sql))]

    return asyncio.run_coroutine_threadsafe(query(), proxy.app.state.loop).result(15)


@pytest.mark.parametrize("stream", [False, True])
def test_a_released_call_is_on_record_before_the_client_has_it(upstream, start_proxy, stream):
    proxy = start_proxy(upstream.url, store_flush_seconds=5.0)  # only the release point can explain a prompt row
    for i in range(3):
        upstream.script(Reply(tool_calls=[("bash", {"command": f'uv run scripts/search.py "q{i}"'})]))
        with proxy.client() as client:
            response = client.post("/v1/chat/completions", json=chat(tools=OPENCODE_TOOLS, stream=stream),
                                   headers={"x-session-id": f"ses_r{i}"})
        assert response.status_code == 200
        calls = _rows_now(proxy, f"SELECT request_id, delivered FROM tool_calls WHERE command LIKE '%q{i}%'")
        assert len(calls) == 1 and calls[0][1]
        request_id = calls[0][0]
        journal = _rows_now(proxy, f"SELECT count(*) FROM request_journal WHERE id = '{request_id}'")[0][0]
        requests = _rows_now(proxy, f"SELECT count(*) FROM requests WHERE id = '{request_id}'")[0][0]
        assert journal + requests == 1
    # Once the requests end, their rows replace the journal entries.
    assert proxy.rows("SELECT count(*) FROM request_journal")[0][0] == 0
    assert proxy.rows("SELECT count(*) FROM requests")[0][0] == 3


def _health(proxy) -> httpx.Response:
    with proxy.client() as client:
        return client.get("/health")


def test_deleted_sqlite_file_refuses_calls_and_says_why(upstream, start_proxy, backend):
    if backend != "sqlite":
        pytest.skip("a database file is SQLite's")
    proxy = start_proxy(upstream.url)
    path = Path(proxy.db_url.removeprefix("sqlite:///"))
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    upstream.script(Reply(tool_calls=[("bash", {"command": ALLOWED})]))
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat(tools=OPENCODE_TOOLS))
    assert response.status_code == 503 and response.json()["error"]["code"] == "store_unavailable"
    health = _health(proxy)
    assert health.status_code == 503 and "deleted" in health.json()["reasons"]["store"]
    with proxy.client() as client:  # while degraded, no request reaches the upstream
        before = len(upstream.requests)
        assert client.post("/v1/chat/completions", json=chat()).status_code == 503
        assert len(upstream.requests) == before


def test_continue_mode_delivers_when_the_store_fails_and_counts_it(upstream, start_proxy, backend):
    if backend != "sqlite":
        pytest.skip("a database file is SQLite's")
    proxy = start_proxy(upstream.url, on_store_failure="continue", store_release_timeout_seconds=1.0)
    Path(proxy.db_url.removeprefix("sqlite:///")).unlink()
    upstream.script(Reply(tool_calls=[("bash", {"command": ALLOWED})]))
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat(tools=OPENCODE_TOOLS))
        assert response.status_code == 200 and response.json()["choices"][0]["message"]["tool_calls"]
        metrics = client.get("/metrics").text
    assert 'allowlist_proxy_store_unrecorded_releases_total{model_name="qwen3.5-27b"} 1.0' in metrics
    health = _health(proxy)
    assert health.status_code == 200 and health.json()["status"] == "degraded"
    # At shutdown no retry can reach a deleted file: its rows are counted lost at once, not retried for ~10 s.
    writer = proxy.services.writer
    failures = writer.failures
    proxy.server.stop()
    assert writer.rows_lost >= 1 and writer.failures - failures <= 2


def test_read_only_store_is_degraded_from_the_start(upstream, start_proxy, backend, tmp_path):
    if backend != "sqlite":
        pytest.skip("a read-only file is SQLite's")
    first = start_proxy(upstream.url)
    path = first.db_url.removeprefix("sqlite:///")
    first.server.stop()
    proxy = start_proxy(upstream.url, db=f"sqlite:///file:{path}?mode=ro&uri=true")
    health = _health(proxy)
    assert health.status_code == 503 and "readonly" in health.json()["reasons"]["store"].lower()
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat(tools=OPENCODE_TOOLS))
    assert response.status_code == 503 and set(response.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.slow
def test_full_disk_is_detected(upstream, start_proxy, backend, tmp_path):
    if backend != "sqlite":
        pytest.skip("a full disk under a database file is SQLite's")
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root: run as root to test a full disk")
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("this machine refuses a tmpfs mount: full disk not tested")
    try:
        proxy = start_proxy(upstream.url, db=f"sqlite:///{mount / 'store.db'}")
        proxy.flush()
        with open(mount / "filler", "wb") as filler:
            try:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
            except OSError:
                pass
        upstream.responder = lambda _body: Reply(content="x" * 2000,
                                                 tool_calls=[("bash", {"command": ALLOWED + " " + "y" * 4000})])
        statuses = []
        with proxy.client() as client:
            for i in range(30):
                statuses.append(client.post("/v1/chat/completions", json=chat(tools=OPENCODE_TOOLS),
                                            headers={"x-session-id": f"ses_f{i}"}).status_code)
                if statuses[-1] == 503:
                    break
        assert statuses[-1] == 503, statuses
        health = _health(proxy)
        assert health.status_code == 503 and "full" in health.json()["reasons"]["store"]
        proxy.server.stop()
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


# ------------------------------------------------------------------ a client that leaves


class _SlowUpstream:
    """Answers nothing until the proxy hangs up; notes when each request arrived and when it was dropped."""

    def __init__(self) -> None:
        self.arrived: list[float] = []
        self.dropped: list[float] = []
        self.app = Starlette(routes=[*(Route(path, self._chat, methods=["POST"]) for path in _LEAVING_BODIES),
                                     Route("/v1/models", self._models, methods=["GET"])])

    async def _models(self, _request: Request) -> Response:
        return Response(json.dumps({"object": "list", "data": [{"id": MODEL}]}), media_type="application/json")

    async def _chat(self, request: Request) -> Response:
        await request.body()
        self.arrived.append(time.monotonic())
        while not await request.is_disconnected():
            await asyncio.sleep(0.002)
        self.dropped.append(time.monotonic())
        return Response(status_code=500)


# Every judged route's request, whole or streamed.
_LEAVING_BODIES: dict[str, Callable[[bool], dict[str, Any]]] = {
    "/v1/chat/completions": lambda stream: chat(tools=OPENCODE_TOOLS, stream=stream),
    "/v1/completions": lambda stream: {"model": MODEL, "prompt": "hi", "stream": stream},
    "/v1/responses": lambda stream: {"model": MODEL, "input": "hi", "stream": stream},
    "/v1/messages": lambda stream: {"model": MODEL, "max_tokens": 64, "stream": stream,
                                    "messages": [{"role": "user", "content": "hi"}]},
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", list(_LEAVING_BODIES))
def test_a_client_that_leaves_cancels_the_upstream_at_once(start_proxy, stream, path):
    slow = _SlowUpstream()
    with ServerThread(slow.app) as server:
        proxy = start_proxy(server.url + "/v1")
        with httpx.Client(base_url=proxy.url, timeout=0.5) as client, pytest.raises(httpx.ReadTimeout):
            client.post(path, json=_LEAVING_BODIES[path](stream), headers={"x-session-id": "ses_gone"})
        left = time.monotonic()
        # The upstream never answers: only the proxy hanging up ends its request. Seconds of slack, not
        # milliseconds, so that a loaded machine does not fail a behaviour check on timing.
        assert wait_until(lambda: slow.dropped, timeout=10)
        assert slow.dropped[0] - left < 5
        time.sleep(0.3)
        assert len(slow.arrived) == 1  # no retry started
        rows = proxy.rows("SELECT outcome, status FROM requests WHERE session_id = 'ses_gone'")
        assert [tuple(r) for r in rows] == [("client_disconnected", 499)]


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("body", [
    b'{"model": "qwen3.5-27b", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"model": "qwen3.5-27b", "messages": [{"role": "user", "content": "hi"}], "seed": ' + b"9" * 100_000 + b"}",
])
def test_deep_nesting_and_long_numbers_are_400s(proxy, body):
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", content=body)
        assert response.status_code == 400, response.text
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
        assert client.get("/health").status_code == 200  # the same connection serves on


@pytest.mark.parametrize("history", [
    {"role": "assistant", "content": None, "tool_calls": "bash"},
    {"role": "assistant", "content": None, "tool_calls": [{"function": "bash"}]},
    {"role": "assistant", "content": [{"type": "text", "text": 5}], "tool_calls": [None, 3]},
    {"role": "assistant", "content": {"a": [[[[]]]]}, "tool_calls": [{"function": {"name": 1, "arguments": 2}}]},
])
def test_odd_history_shapes_never_give_a_500(proxy, history):
    body = chat([{"role": "user", "content": "hi"}, history, {"role": "user", "content": "go on"}])
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=body)
    assert response.status_code < 500, response.text


def test_the_record_says_what_the_client_got(upstream, proxy):
    deep = b"[" * 100_000 + b"]" * 100_000
    upstream.responder = None

    async def nested(_request: Request) -> Response:
        return Response(b'{"choices": ' + deep + b"}", media_type="application/json")

    upstream.app.router.routes.insert(0, Route("/v1/chat/completions", nested, methods=["POST"]))
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat(), headers={"x-session-id": "ses_deep"})
    rows = proxy.rows("SELECT status FROM requests WHERE session_id = 'ses_deep'")
    assert [r[0] for r in rows] == [response.status_code]


def test_arguments_are_stored_once_and_a_huge_one_is_capped(upstream, proxy):
    upstream.script(Reply(tool_calls=[("write", {"filePath": "notes.md", "content": "x" * 1_000_000}),
                                      ("bash", {"command": ALLOWED})], arguments_chunk=65536))
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat(tools=OPENCODE_TOOLS))
    assert len(response.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) > 1_000_000
    rows = proxy.rows("SELECT tool_name, arguments_raw, arguments_json, command FROM tool_calls ORDER BY call_index")
    (_, raw, parsed, _), (_, small_raw, small_parsed, command) = rows
    assert len(raw) <= 65_536 and raw.endswith(CUT_MARKER) and len(parsed or "") <= 65_536
    assert json.loads(small_raw) == {"command": ALLOWED} and small_parsed is None and command == ALLOWED
