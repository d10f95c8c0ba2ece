"""Answers read whole on the proxy's own keep-alive connections (proxy/upstream/whole.py), against a server that
answers scripted bytes: what httpx made of the same bytes, or the same failure."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from proxy.config import Settings
from proxy.errors import UpstreamProtocolError, UpstreamTimeout, UpstreamUnavailable
from proxy.upstream.client import Upstream
from proxy.upstream.whole import UpstreamFailure, WholeAnswers, usable_for

GZIPPED = gzip.compress(b'{"ok":true}', mtime=0)  # the same bytes in every test process (xdist compares ids)
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}"


class Scripted:
    """A TCP server that reads one request at a time (head and content-length body) and answers `reply(n)` for the
    n-th request on the whole server; None closes the connection without answering, b"" stalls."""

    def __init__(self, reply: Callable[[int], bytes | None]) -> None:
        self.reply = reply
        self.requests: list[bytes] = []
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.handlers: set[asyncio.Task[None]] = set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append(head + await reader.readexactly(length))
                answer = self.reply(len(self.requests))
                if answer is None:
                    break
                if answer == b"":
                    await asyncio.sleep(30)
                writer.write(answer)
                await writer.drain()
                head_sent = answer.lower().rsplit(b"\r\n\r\n", 1)[0]
                if b"connection: close" in head_sent or not (b"content-length" in head_sent or b"chunked" in head_sent):
                    break  # the answer ends with the connection
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"


@asynccontextmanager
async def scripted(reply: Callable[[int], bytes | None]) -> AsyncIterator[Scripted]:
    server = Scripted(reply)
    server.server = await asyncio.start_server(server._serve, "127.0.0.1", 0)
    try:
        yield server
    finally:
        server.server.close()
        for task in server.handlers:
            task.cancel()
        await asyncio.gather(*server.handlers, return_exceptions=True)


def _client(url: str, read_timeout: float = 5.0) -> WholeAnswers:
    return WholeAnswers(url, connect_timeout=2.0, read_timeout=read_timeout,
                        default_headers={"accept-encoding": "identity"})


async def _post(client: WholeAnswers, url: str, body: bytes = b'{"x":1}', **headers: str) -> httpx.Response:
    return await client.request("POST", httpx.URL(url + "/chat/completions"),
                                {"content-type": "application/json", **headers}, body)


async def test_answers_come_back_as_httpx_responses_on_one_kept_connection():
    async with scripted(lambda n: OK) as server:
        client = _client(server.url)
        for _ in range(3):
            response = await _post(client, server.url, authorization="Bearer k")
            assert response.status_code == 200 and response.json() == {"ok": True}
            assert response.headers["content-type"] == "application/json"
        assert server.connections == 1
        first = server.requests[0]
        assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:")
        assert b"\r\nauthorization: Bearer k\r\n" in first and b"\r\naccept-encoding: identity\r\n" in first
        assert first.endswith(b"content-length: 7\r\n\r\n{\"x\":1}")
        await client.aclose()


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\n{\"ok\r\n7\r\n\":true}\r\n0\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\n" + OK,
    b"HTTP/1.0 200 OK\r\n\r\n{\"ok\":true}",  # ended by the connection's end
    b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n{\"ok\":true}",
    b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n" % len(GZIPPED) + GZIPPED,
], ids=["chunked", "interim", "http-1.0-to-the-end", "close-to-the-end", "gzip"])
async def test_every_framing_reads_as_httpx_reads_it(answer: bytes):
    async with scripted(lambda n: answer if n <= 2 else OK) as server:
        client = _client(server.url)
        mine = await _post(client, server.url)
        async with httpx.AsyncClient() as reference:
            theirs = await reference.post(server.url + "/chat/completions", content=b"{}")
        assert (mine.status_code, mine.content, list(mine.headers.raw)) \
            == (theirs.status_code, theirs.content, list(theirs.headers.raw))
        assert (await _post(client, server.url)).json() == {"ok": True}  # and the next request goes through
        await client.aclose()


async def test_bytes_after_the_answer_leave_it_whole_and_the_connection_unused():
    async with scripted(lambda n: OK + b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nno" if n == 1 else OK) as server:
        client = _client(server.url)
        assert (await _post(client, server.url)).json() == {"ok": True}
        assert (await _post(client, server.url)).json() == {"ok": True}
        assert server.connections == 2
        await client.aclose()


async def test_a_connection_the_server_closed_while_idle_is_not_reused():
    async with scripted(lambda n: OK.replace(b"content-type", b"connection: close\r\ncontent-type")) as server:
        client = _client(server.url)
        for _ in range(3):
            assert (await _post(client, server.url)).json() == {"ok": True}
        assert server.connections == 3
        await client.aclose()


@pytest.mark.parametrize(("answer", "kind"), [
    (None, "RemoteProtocolError"),  # closed without an answer
    (b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\nconnection: close\r\n\r\n{\"cut\"", "RemoteProtocolError"),
    (b"NOT HTTP AT ALL\r\n\r\n", "RemoteProtocolError"),
    (b"", "ReadTimeout"),  # stalls
])
async def test_a_broken_or_stalled_answer_is_a_failure_of_its_kind(answer: bytes | None, kind: str):
    async with scripted(lambda n: answer) as server:
        client = _client(server.url, read_timeout=0.3)
        with pytest.raises(UpstreamFailure) as failed:
            await _post(client, server.url)
        assert failed.value.kind == kind
        await client.aclose()


async def test_a_header_that_would_split_the_request_is_never_sent():
    async with scripted(lambda n: OK) as server:
        client = _client(server.url)
        for name, value in (("x-a", "1\r\nx-injected: 2"), ("x-b", "1\n"), ("bad name", "1"), ("x-c", "a\x00")):
            with pytest.raises(UpstreamFailure):
                await client.request("GET", httpx.URL(server.url + "/models"), {name: value}, None)
        assert server.requests == []
        await client.aclose()


async def test_failures_are_the_proxys_errors_worded_as_for_httpx():
    async with scripted(lambda n: b"") as server:
        upstream = Upstream(Settings(upstream=server.url, read_timeout=0.3))
        with pytest.raises(UpstreamTimeout, match="timed out"):
            await upstream.request("POST", "/chat/completions", headers={}, content=b"{}")
        await upstream.aclose()
    async with scripted(lambda n: None) as server:
        upstream = Upstream(Settings(upstream=server.url))
        with pytest.raises(UpstreamProtocolError, match="broke the connection"):
            await upstream.request("POST", "/chat/completions", headers={}, content=b"{}")
        assert upstream.failures == 1
        await upstream.aclose()
    upstream = Upstream(Settings(upstream="http://127.0.0.1:9/v1", connect_timeout=1.0))
    with pytest.raises(UpstreamUnavailable, match="unreachable"):
        await upstream.request("GET", "/models", headers={})
    await upstream.aclose()


def test_an_upstream_reached_through_a_proxy_of_the_environment_stays_on_httpx(monkeypatch):
    assert usable_for("http://127.0.0.1:8000/v1") and usable_for("https://vllm.internal/v1")
    monkeypatch.setenv("http_proxy", "http://squid.internal:3128")
    monkeypatch.setenv("no_proxy", "localhost,127.0.0.1")
    assert not usable_for("http://vllm.internal:8000/v1")
    assert usable_for("http://127.0.0.1:8000/v1")
    assert Upstream(Settings(upstream="http://vllm.internal:8000/v1"))._whole is None


def test_connections_belong_to_the_loop_that_made_them():
    answers: list[int] = []

    async def ask(client: WholeAnswers, url: str) -> None:
        answers.append((await _post(client, url)).status_code)

    async def serve(ready: asyncio.Future[str], stop: asyncio.Event) -> None:
        async with scripted(lambda n: OK) as server:
            ready.set_result(server.url)
            await stop.wait()

    import threading

    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready: asyncio.Future[str] = loop.create_future()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(ready, stop),))
    thread.start()
    try:
        while not ready.done():
            pass
        url = ready.result()
        client = _client(url)
        asyncio.run(ask(client, url))
        asyncio.run(ask(client, url))  # another loop: the first loop's connection is not used there
        assert answers == [200, 200]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(5)
        loop.close()
