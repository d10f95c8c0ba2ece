"""Client connection limits: slow heads and bodies are closed, idle connections never starve real requests."""

from __future__ import annotations

import resource
import socket
import time

import pytest

from tests.conftest import chat


@pytest.fixture
def sqlite_only(backend: str) -> None:
    if backend != "sqlite":
        pytest.skip("connection limits do not depend on the database")


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass  # a 408/400 answer may come first; what matters is that the server hangs up
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


def _metric(proxy, limit: str) -> float:
    with proxy.client() as client:
        text = client.get("/metrics").text
    prefix = f'allowlist_proxy_connection_limits_total{{limit="{limit}"}}'
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def test_a_head_that_never_completes_and_a_stalled_body_are_closed(sqlite_only, upstream, start_proxy):
    proxy = start_proxy(upstream.url, header_timeout_seconds=0.5, body_timeout_seconds=0.5)
    host, port = "127.0.0.1", proxy.server.port
    silent = socket.create_connection((host, port))
    partial = socket.create_connection((host, port))
    partial.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    stalled = socket.create_connection((host, port))
    stalled.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 100\r\n\r\n{\"model\":")
    try:
        assert _closed_within(silent, 3) and _closed_within(partial, 3) and _closed_within(stalled, 3)
    finally:
        for sock in (silent, partial, stalled):
            sock.close()
    assert _metric(proxy, "header_timeout") >= 2 and _metric(proxy, "body_timeout") >= 1


def test_eleven_hundred_idle_connections_do_not_stop_a_real_request(sqlite_only, upstream, start_proxy):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 3000 and hard >= 3000:
        resource.setrlimit(resource.RLIMIT_NOFILE, (3000, hard))
    elif soft < 3000:
        pytest.skip(f"the open-file limit ({soft}) is too low for 1,100 connections at both ends")
    # One peer here: the global limit is what this test measures, not the per-client one.
    proxy = start_proxy(upstream.url, max_connections=1000, max_connections_per_client=1000)
    idle = []
    try:
        for _ in range(1100):
            idle.append(socket.create_connection(("127.0.0.1", proxy.server.port)))
        time.sleep(0.2)
        started = time.monotonic()
        with proxy.client(timeout=10) as client:
            response = client.post("/v1/chat/completions", json=chat())
        assert response.status_code == 200
        assert time.monotonic() - started < 5
    finally:
        for sock in idle:
            sock.close()
    assert _metric(proxy, "too_many") >= 100


def test_one_peer_trickling_bodies_cannot_take_every_slot(sqlite_only, upstream, start_proxy):
    # The trickling peer connects from 127.0.0.2, the real client from 127.0.0.1: the budget is per address.
    proxy = start_proxy(upstream.url, max_connections=50, max_connections_per_client=10, body_timeout_seconds=30)
    trickling = []
    try:
        for _ in range(60):
            sock = socket.create_connection(("127.0.0.1", proxy.server.port), source_address=("127.0.0.2", 0))
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 1000\r\n\r\n{\"model\":")
            trickling.append(sock)
        with proxy.client(timeout=10) as client:
            assert client.post("/v1/chat/completions", json=chat()).status_code == 200
        open_ones = sum(not _closed_within(sock, 0.05) for sock in trickling)
        assert open_ones <= 10
    finally:
        for sock in trickling:
            sock.close()
    assert _metric(proxy, "per_client") >= 50
