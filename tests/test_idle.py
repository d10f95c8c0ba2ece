"""An idle proxy sleeps: no thread of `allowlist-proxy serve` wakes on a timer more than about once a second
(uvicorn's 0.1 s tick and watchfiles' 50 ms poll are gone), and what those timers did still happens: a signal
stops it at once, and the `date` header is the current second's. A stop waits for what is in flight (up to the
grace), not for uvicorn's fixed tenths of a second."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.testing.server import ServerThread, free_port
from tests.conftest import ROOT, STRICT_POLICY, voluntary_switches, wait_until, woken

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and inotify are Linux's")


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code in (200, 503)
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_an_idle_served_proxy_wakes_nothing_and_stops_at_a_signal(tmp_path: Path, stop: signal.Signals) -> None:
    port = free_port()
    env = {**os.environ, "ALLOWLIST_PROXY_LOG_LEVEL": "warning"}
    proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream",
                             "http://127.0.0.1:9/v1", "--db", f"sqlite:///{tmp_path / 'idle.db'}",
                             "--policy", str(STRICT_POLICY)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: _up(url), timeout=30)
        time.sleep(0.3)  # what the health check started settles
        before = voluntary_switches(proc.pid)
        time.sleep(1.0)
        wakes = woken(before, voluntary_switches(proc.pid))
        # The throughput windows end every 10 s; uvicorn's tick alone was 10 a second, watchfiles' poll 20.
        assert sum(wakes.values()) <= 2, wakes

        date = httpx.get(f"{url}/health").headers["date"]
        assert abs(parsedate_to_datetime(date).timestamp() - time.time()) < 2, date

        started = time.monotonic()
        proc.send_signal(stop)
        assert proc.wait(10) in (0, -stop)  # uvicorn re-raises the signal once shut down
        assert time.monotonic() - started < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_date_header_moves_with_the_clock(proxy) -> None:  # type: ignore[no-untyped-def]
    with proxy.client() as client:
        first = parsedate_to_datetime(client.get("/health").headers["date"])
        time.sleep(1.05)
        second = parsedate_to_datetime(client.get("/health").headers["date"])
    assert (second - first).total_seconds() >= 1


def _streaming_app(chunks: int, pause: float) -> Any:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse, StreamingResponse
    from starlette.routing import Route

    async def slow(_request: Any) -> StreamingResponse:
        async def body() -> Any:
            for i in range(chunks):
                yield f"chunk {i}\n".encode()
                await asyncio.sleep(pause)

        return StreamingResponse(body(), media_type="text/plain")

    async def quick(_request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/slow", slow), Route("/quick", quick)])


def test_a_stop_lets_the_answer_in_flight_finish() -> None:
    server = ServerThread(_streaming_app(chunks=5, pause=0.05)).start()
    with httpx.Client(base_url=server.url, timeout=10) as client, client.stream("GET", "/slow") as response:
        lines = response.iter_lines()
        first = next(lines)
        server.request_stop()
        rest = list(lines)
    server.stop()
    assert [first, *rest] == [f"chunk {i}" for i in range(5)]
    assert not server._thread.is_alive() and not server.server.server_state.connections


def test_a_stop_closes_idle_keep_alive_connections_and_ends() -> None:
    server = ServerThread(_streaming_app(chunks=1, pause=0)).start()
    with httpx.Client(base_url=server.url, timeout=5) as client:
        assert client.get("/quick").text == "ok"  # the connection stays open, idle
        server.stop()
        assert not server._thread.is_alive()
        assert not server.server.server_state.connections
        with pytest.raises(httpx.TransportError):
            client.get("/quick")


def test_a_stop_past_the_grace_cancels_the_answer_and_ends() -> None:
    server = ServerThread(_streaming_app(chunks=10_000, pause=0.05),
                          options={"timeout_graceful_shutdown": 0.3}).start()
    with httpx.Client(base_url=server.url, timeout=10) as client, client.stream("GET", "/slow") as response:
        lines = response.iter_lines()
        next(lines)
        server.request_stop()
        with pytest.raises(httpx.TransportError):
            list(lines)  # cut short: the answer never ends by itself
    server.stop()
    assert not server._thread.is_alive()


def test_each_server_gets_its_log_level_though_uvicorn_logging_is_set_up_once() -> None:
    import logging

    quiet = ServerThread(_streaming_app(chunks=1, pause=0), log_level="error").start()
    try:
        assert logging.getLogger("uvicorn.error").level == logging.ERROR
        assert logging.getLogger("uvicorn.error").handlers or logging.getLogger("uvicorn").handlers
    finally:
        quiet.stop()
    chatty = ServerThread(_streaming_app(chunks=1, pause=0), log_level="info").start()
    try:
        assert logging.getLogger("uvicorn.error").level == logging.INFO
    finally:
        chatty.stop()
