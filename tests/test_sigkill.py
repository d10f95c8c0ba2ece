"""SIGKILL under load, again and again: no call a client received is missing from the store after restart.

Each trial starts the proxy as its own process on each test database (SQLite, and Postgres when configured,
side by side to halve the time) (the start also recovers what the
previous, killed, proxy left), drives concurrent sessions through it (streamed and whole), and kills it with
SIGKILL at a random moment. Every call a client has seen, even in a stream cut by the kill, must be stored
as delivered, with its request's row.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from proxy.store.db import create_engine
from proxy.testing.characters import OPENCODE_TOOLS
from proxy.testing.scripted_upstream import Reply
from proxy.testing.server import free_port
from tests.conftest import ROOT, STRICT_POLICY, chat, wait_until
from tests.databases import PG_ADMIN_URL, database_url

# The issue asks for at least 10 kills per database; a slow machine may lower it for a local run.
TRIALS = int(os.environ.get("ALLOWLIST_PROXY_TEST_KILL_TRIALS", "10"))
SESSIONS = 16


def _reply(_body: dict) -> Reply:
    return Reply(content="ok ", tool_calls=[("bash", {"command": f'uv run scripts/search.py "{uuid.uuid4().hex}"'})],
                 chunk_delay=0.002)


def _spawn(db_url: str, upstream_url: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "ALLOWLIST_PROXY_LOG_LEVEL": "error"}
    proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream", upstream_url,
                             "--db", db_url, "--policy", str(STRICT_POLICY)], cwd=ROOT, env=env,
                            stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}"


def _ready(url: str) -> None:
    def up() -> bool:
        try:
            return httpx.get(url + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    assert wait_until(up, timeout=60), "the proxy did not start"
    # Warm: the first request of a process loads what requests need (the kill is meant for a proxy at work).
    warm = httpx.post(url + "/v1/chat/completions", json=chat(tools=OPENCODE_TOOLS), timeout=30)
    assert warm.status_code == 200, warm.text


def _start_all(db_urls: list[str], upstream_url: str) -> list[tuple[subprocess.Popen, str]]:
    """One proxy per database, started side by side (their start-up is most of this test's time)."""
    procs = [_spawn(url, upstream_url) for url in db_urls]
    try:
        for _, url in procs:
            _ready(url)
    except BaseException:
        for proc, _ in procs:
            proc.kill()
        raise
    return procs


def _commands(data: bytes) -> list[str]:
    found = []
    for line in data.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        chunk = json.loads(line[len(b"data: "):])
        for choice in chunk.get("choices") or []:
            for call in (choice.get("delta") or {}).get("tool_calls") or []:
                found.append(json.loads(call["function"]["arguments"])["command"])
    return found


async def _load(url: str, proc: subprocess.Popen, received: set[str], more: int) -> None:
    """Load until clients have received `more` calls (however slow the machine), then SIGKILL at once."""
    async def session(i: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            turn = 0
            while True:
                turn += 1
                stream = (i + turn) % 2 == 0
                body = chat([{"role": "user", "content": f"s{i} t{turn}"}], tools=OPENCODE_TOOLS, stream=stream)
                headers = {"x-session-id": f"ses_k{i}"}
                if stream:
                    async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
                        pending = b""
                        async for piece in response.aiter_raw():
                            pending += piece
                            complete, _, pending = pending.rpartition(b"\n\n")
                            received.update(_commands(complete))
                else:
                    response = await client.post("/v1/chat/completions", json=body, headers=headers)
                    message = response.json()["choices"][0]["message"]
                    received.update(json.loads(c["function"]["arguments"])["command"]
                                    for c in message.get("tool_calls") or [])

    target = len(received) + more
    tasks = [asyncio.create_task(session(i)) for i in range(SESSIONS)]
    deadline = time.monotonic() + 20
    while len(received) < target and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, httpx.HTTPError | json.JSONDecodeError | KeyError) for r in results), results


async def _stored(db_url: str) -> tuple[dict[str, bool], int]:
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            calls = {c: bool(d) for c, d in await conn.execute(text("SELECT command, delivered FROM tool_calls"))}
            orphans = (await conn.execute(text(
                "SELECT count(*) FROM tool_calls t LEFT JOIN requests r ON r.id = t.request_id "
                "WHERE r.id IS NULL"))).scalar()
    finally:
        await engine.dispose()
    return calls, orphans


def _databases(tmp_path: Path, stack: ExitStack) -> list[str]:
    urls = [stack.enter_context(database_url("sqlite", tmp_path))]
    if PG_ADMIN_URL:
        urls.append(stack.enter_context(database_url("postgres", tmp_path)))
    return urls


async def _trial(procs: list[tuple[subprocess.Popen, str]], received: list[set[str]]) -> None:
    more = random.randint(5, 40)
    await asyncio.gather(*(_load(url, proc, seen, more) for (proc, url), seen in zip(procs, received,
                                                                                          strict=True)))


@pytest.mark.slow
def test_sigkill_under_load_loses_no_delivered_call(upstream, tmp_path):
    upstream.responder = _reply
    with ExitStack() as stack:
        urls = _databases(tmp_path, stack)
        received: list[set[str]] = [set() for _ in urls]
        for _ in range(TRIALS):
            procs = _start_all(urls, upstream.url)
            try:
                asyncio.run(_trial(procs, received))
            finally:
                for proc, _ in procs:
                    proc.kill()
                    proc.wait(10)
        restarted = [proc for proc, _ in _start_all(urls, upstream.url)]  # the restart after the last kill
        for proc in restarted:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(40) in (0, -signal.SIGTERM)
        for url, seen in zip(urls, received, strict=True):
            calls, orphans = asyncio.run(_stored(url))
            where = url.split(":", 1)[0]
            assert len(seen) >= TRIALS * 5, f"{where}: the load delivered too few calls to mean anything"
            print(f"{where}: {len(seen)} calls received over {TRIALS} kills, all on record")
            missing = [c for c in seen if not calls.get(c)]
            assert missing == [], f"{where}: {len(missing)} of {len(seen)} calls received are not on record"
            assert orphans == 0, f"{where}: call rows without their request's row"
