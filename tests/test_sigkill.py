"""SIGKILL under load, again and again: no call a client received is missing from the store after restart.

Each trial starts the proxy as its own process on a test database (SQLite, and Postgres when configured,
each database's trials beside the other's; the start also recovers what the previous, killed, proxy
left), drives concurrent sessions through it (streamed and whole), and kills it with SIGKILL at a random
moment. Every call a client has seen, even in a stream cut by the kill, must be stored as delivered, with
its request's row.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from multiprocessing.process import BaseProcess
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from proxy.store.db import create_engine
from proxy.testing.characters import OPENCODE_TOOLS
from proxy.testing.scripted_upstream import Reply
from proxy.testing.server import free_port
from tests.conftest import STRICT_POLICY, chat, wait_until
from tests.databases import PG_ADMIN_URL, database_url

# The issue asks for at least 10 kills per database; a slow machine may lower it for a local run.
TRIALS = int(os.environ.get("ALLOWLIST_PROXY_TEST_KILL_TRIALS", "10"))
SESSIONS = 16


def _reply(_body: dict) -> Reply:
    return Reply(content="ok ", tool_calls=[("bash", {"command": f'uv run scripts/search.py "{uuid.uuid4().hex}"'})],
                 chunk_delay=0.002)


# Every start is a fork of one process that has imported the proxy already (a forkserver), so a trial's
# start costs the proxy's own start-up (recovery included), not Python importing it again: each proxy is
# still a process of its own, served by the real `serve` command and killed with a real SIGKILL.
_STARTS = multiprocessing.get_context("forkserver")
_STARTS.set_forkserver_preload(["proxy.cli", "proxy.http.app"])


def _serve(argv: list[str]) -> None:
    from proxy.cli import main

    os.environ["ALLOWLIST_PROXY_LOG_LEVEL"] = "error"
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    raise SystemExit(main(argv))


def _spawn(db_url: str, upstream_url: str) -> tuple[BaseProcess, str]:
    port = free_port()
    proc = _STARTS.Process(target=_serve, args=(["serve", "--port", str(port), "--upstream", upstream_url,
                                                  "--db", db_url, "--policy", str(STRICT_POLICY)],), daemon=True)
    proc.start()
    return proc, f"http://127.0.0.1:{port}"


def _ready(url: str) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:  # one client: polling builds no TLS set-up each time
        def up() -> bool:
            try:
                return client.get("/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        assert wait_until(up, timeout=60), "the proxy did not start"
        # Warm: the first request of a process loads what requests need (the kill is meant for a proxy at work).
        warm = client.post("/v1/chat/completions", json=chat(tools=OPENCODE_TOOLS))
        assert warm.status_code == 200, warm.text


def _start(db_url: str, upstream_url: str) -> tuple[BaseProcess, str]:
    proc, url = _spawn(db_url, upstream_url)
    try:
        _ready(url)
    except BaseException:
        proc.kill()
        raise
    return proc, url


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


async def _load(url: str, proc: BaseProcess, received: set[str], more: int) -> None:
    """Load until clients have received `more` calls (however slow the machine), then SIGKILL at once."""
    async def session(i: int, client: httpx.AsyncClient) -> None:
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
    # One client (its TLS set-up made once, not per session), a connection for each session.
    async with httpx.AsyncClient(base_url=url, timeout=10, limits=httpx.Limits(max_connections=SESSIONS)) as client:
        tasks = [asyncio.create_task(session(i, client)) for i in range(SESSIONS)]
        deadline = time.monotonic() + 20
        while len(received) < target and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        proc.kill()  # SIGKILL
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


def _soak(db_url: str, upstream_url: str) -> set[str]:
    """TRIALS kills of a proxy at work on one database, then a restart (recovering the last kill) and a
    graceful stop; returns every call the clients received."""
    received: set[str] = set()
    for _ in range(TRIALS):
        proc, url = _start(db_url, upstream_url)
        try:
            asyncio.run(_load(url, proc, received, random.randint(5, 40)))
        finally:
            proc.kill()
            proc.join(10)
    proc, _ = _start(db_url, upstream_url)  # the restart after the last kill
    proc.terminate()  # SIGTERM: the graceful stop
    proc.join(40)
    assert proc.exitcode in (0, -signal.SIGTERM)
    return received


@pytest.mark.slow
def test_sigkill_under_load_loses_no_delivered_call(upstream, tmp_path):
    upstream.responder = _reply
    with ExitStack() as stack:
        urls = _databases(tmp_path, stack)
        # Each database's trials run on their own, side by side: neither waits for the other's start or load.
        with ThreadPoolExecutor(len(urls)) as pool:
            received = list(pool.map(_soak, urls, [upstream.url] * len(urls)))
        for url, seen in zip(urls, received, strict=True):
            calls, orphans = asyncio.run(_stored(url))
            where = url.split(":", 1)[0]
            assert len(seen) >= TRIALS * 5, f"{where}: the load delivered too few calls to mean anything"
            print(f"{where}: {len(seen)} calls received over {TRIALS} kills, all on record")
            missing = [c for c in seen if not calls.get(c)]
            assert missing == [], f"{where}: {len(missing)} of {len(seen)} calls received are not on record"
            assert orphans == 0, f"{where}: call rows without their request's row"
