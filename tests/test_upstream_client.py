"""The upstream client: httpx's transport with the polling network backend really in use, no cookie jar,
parsed targets."""

from __future__ import annotations

import socket
import ssl

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from proxy.config import Settings
from proxy.testing.server import ServerThread
from proxy.upstream.client import Upstream
from proxy.upstream.transport import PollingBackend, _readable, tls_context, upstream_transport


def test_the_pool_uses_the_polling_backend():
    transport = upstream_transport(httpx.Limits(max_connections=5, max_keepalive_connections=2), retries=1)
    assert isinstance(transport._pool._network_backend, PollingBackend)
    assert transport._pool._max_connections == 5
    assert transport._pool._max_keepalive_connections == 2
    assert transport._pool._retries == 1


def test_readable_means_data_or_end_waiting():
    left, right = socket.socketpair()
    try:
        assert not _readable(left)
        right.sendall(b"x")
        assert _readable(left)
        left.recv(1)
        right.close()
        assert _readable(left)  # the peer closed: a read would return b""
    finally:
        left.close()
    assert _readable(left)  # closed here: fileno() is -1
    assert _readable(None)


async def test_requests_go_through_and_connections_are_reused(upstream):
    transport = upstream_transport(httpx.Limits(max_connections=5, max_keepalive_connections=2), retries=0)
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(3):
            response = await client.get(upstream.url + "/models")
            assert response.status_code == 200 and response.json()["data"]
        assert len(transport._pool.connections) == 1


async def test_upstream_cookies_are_not_kept_for_other_clients():
    upstream = Upstream(Settings(upstream="http://upstream.test/v1"))
    try:
        request = httpx.Request("GET", "http://upstream.test/v1/models")
        upstream.client.cookies.extract_cookies(httpx.Response(200, headers={"set-cookie": "a=b; Path=/"},
                                                               request=request))
        upstream.client.cookies.set("c", "d", domain="upstream.test")
        upstream.client.cookies = {"e": "f"}
        assert not upstream.client.cookies
    finally:
        await upstream.aclose()


async def test_a_cookie_the_upstream_sets_goes_out_with_no_later_request():
    seen: list[str | None] = []

    async def models(request: Request) -> JSONResponse:
        seen.append(request.headers.get("cookie"))
        return JSONResponse({"data": []}, headers={"set-cookie": "session=one-client; Path=/"})

    server = ServerThread(Starlette(routes=[Route("/v1/models", models)])).start()
    upstream = Upstream(Settings(upstream=server.url + "/v1"))
    try:
        for _ in range(2):
            response = await upstream.client.get(server.url + "/v1/models")
            assert response.headers["set-cookie"] == "session=one-client; Path=/"  # the client still gets it
        assert seen == [None, None]
    finally:
        await upstream.aclose()
        server.stop()


async def test_targets_are_the_base_url_and_path():
    upstream = Upstream(Settings(upstream="http://upstream.test/v1/"))
    try:
        assert str(upstream._target("/chat/completions")) == upstream.url("/chat/completions") \
            == "http://upstream.test/v1/chat/completions"
        assert upstream._target("/models") is upstream._target("/models")
    finally:
        await upstream.aclose()


async def test_reads_and_writes_keep_httpcores_errors():
    """The stream reads anyio's stream itself (httpcore's wrapper keeps it as `_stream`): a stalled read is
    httpcore's ReadTimeout, the peer's close an empty read, and writing to a closed stream a WriteError."""
    import anyio
    import httpcore

    from proxy.upstream.transport import PollingBackend

    async def serve(client: anyio.abc.SocketStream) -> None:
        async with client:
            await client.send(b"hello")
            await anyio.sleep(0.3)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        stream = await PollingBackend().connect_tcp("127.0.0.1", port)
        assert await stream.read(100, timeout=5) == b"hello"
        try:
            await stream.read(100, timeout=0.05)
        except httpcore.ReadTimeout:
            pass
        else:
            raise AssertionError("a stalled read must time out")
        assert await stream.read(100, timeout=5) == b""  # the server closed
        await stream.aclose()
        try:
            await stream.write(b"x", timeout=1)
        except httpcore.WriteError:
            pass
        else:
            raise AssertionError("writing to a closed stream must fail")
        tg.cancel_scope.cancel()


async def test_a_write_goes_out_without_a_turn_of_the_event_loop_and_arrives_whole():
    """A request's head and body are handed to the transport at once (anyio's send ends with a turn of the loop,
    behind every stream's chunks); a large one that fills the transport's buffer is still written whole."""
    import asyncio

    import anyio

    from proxy.upstream.transport import PollingBackend

    received = bytearray()
    done = asyncio.Event()
    big = b"x" * (8 << 20)  # past any socket buffer: the transport's buffer fills and the write waits

    async def serve(client: anyio.abc.SocketStream) -> None:
        async with client:
            while len(received) < 5 + len(big):
                received.extend(await client.receive())
            done.set()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        stream = await PollingBackend().connect_tcp("127.0.0.1", port)
        turned: list[bool] = []
        asyncio.get_running_loop().call_soon(turned.append, True)
        await stream.write(b"hello", timeout=5)
        assert turned == []
        await stream.write(big, timeout=30)
        await asyncio.wait_for(done.wait(), 30)
        assert bytes(received) == b"hello" + big
        await stream.aclose()
        tg.cancel_scope.cancel()


async def test_every_upstream_shares_the_process_tls_context():
    # Reading the CA bundle into a context costs tens of milliseconds: once per process, not per upstream.
    plain, secure = Upstream(Settings(upstream="http://a.test/v1")), Upstream(Settings(upstream="https://b.test/v1"))
    try:
        context = tls_context()
        assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
        for upstream in (plain, secure):
            assert upstream.client._transport._pool._ssl_context is context
        assert secure._whole is None or secure._whole._ssl is context
    finally:
        await plain.aclose()
        await secure.aclose()
