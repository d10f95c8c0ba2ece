"""The httpx transport to the upstream: httpx's own, with a network backend that makes the pool's
per-request bookkeeping and each read cheap.

Before every request and after every response, httpcore's pool asks each pooled connection whether
it has expired, which asks the socket whether it is readable. anyio answers through
`SocketStream.extra_attributes`, a table of lambdas rebuilt on every ask: with a few dozen pooled
connections that was the proxy's largest cost per request. Here the socket is looked up once per
connection and polled directly; everything else is anyio's stream as is.
"""

from __future__ import annotations

import asyncio
import functools
import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import anyio
import anyio.abc
import httpcore
import httpx

__all__ = ["tls_context", "upstream_transport"]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (certifi's CA bundle, or SSL_CERT_FILE / SSL_CERT_DIR), built once per process.

    Building one reads and parses the whole CA bundle (tens of milliseconds); a context is safe to share between
    connections, threads and event loops, so each upstream, replica and client of a process uses this one."""
    return httpx.create_ssl_context()


def upstream_transport(limits: httpx.Limits, *, retries: int) -> httpx.AsyncHTTPTransport:
    transport = httpx.AsyncHTTPTransport(verify=tls_context(), limits=limits, retries=retries)
    # httpx offers no way to hand its pool a network backend, so the pool is rebuilt with the same
    # settings (a test pins that the backend is in use, should httpx rename `_pool`).
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=tls_context(),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        retries=retries,
        network_backend=PollingBackend(),
    )
    return transport


def _readable(sock: socket.socket | None) -> bool:
    """httpcore's rule: a socket with data (or EOF) waiting is readable; a gone socket counts as readable."""
    fd = -1 if sock is None else sock.fileno()
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class PollingStream(httpcore.AsyncNetworkStream):
    """anyio's stream, read and written directly, with `is_readable` answered from a socket looked up once.

    httpcore's own wrapper builds an exception table, enters a generator-based context manager and an anyio
    cancel scope on every read: for a stream relayed chunk by chunk that was most of the proxy's reading. Here a
    read is the receive, under asyncio's own timeout, with the same errors (httpcore's) for the same causes."""

    __slots__ = ("_inner", "_protocol", "_socket", "_stream", "_transport")

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        # httpcore keeps anyio's stream as `_stream` (tests/test_upstream_client.py pins it).
        self._stream: anyio.abc.ByteStream = inner._stream  # type: ignore[attr-defined]
        self._socket: socket.socket | None = inner.get_extra_info("socket")
        # anyio's asyncio transport and protocol under the stream, for `write` (None where anyio has others).
        transport, protocol = getattr(self._stream, "_transport", None), getattr(self._stream, "_protocol", None)
        usable = isinstance(transport, asyncio.WriteTransport) and isinstance(
            getattr(protocol, "write_event", None), asyncio.Event)
        self._transport: asyncio.WriteTransport | None = transport if usable else None
        self._protocol: Any = protocol if usable else None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                return await self._stream.receive(max_bytes)
        except anyio.EndOfStream:
            return b""
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc)) from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """The bytes handed to asyncio's transport at once. anyio's `send` ends every write with a turn of the event
        loop (fairness): a request's head and body were two turns, each behind every stream's chunks ready then,
        before the upstream had the request. A transport whose buffer is full is waited for, as anyio waits."""
        if not buffer:
            return
        transport, protocol = self._transport, self._protocol
        if transport is not None and protocol.write_event.is_set() and not transport.is_closing() \
                and protocol.exception is None:
            try:
                transport.write(buffer)
            except RuntimeError as exc:  # closed under us
                raise httpcore.WriteError(str(exc)) from exc
            if protocol.write_event.is_set():
                return
            try:
                async with asyncio.timeout(timeout):
                    await protocol.write_event.wait()
            except TimeoutError as exc:
                raise httpcore.WriteTimeout(str(exc)) from exc
            if protocol.exception is not None:
                raise httpcore.WriteError(str(protocol.exception)) from protocol.exception
            return
        try:
            async with asyncio.timeout(timeout):
                await self._stream.send(buffer)
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(str(exc)) from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise httpcore.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        return PollingStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return _readable(self._socket)
        return self._inner.get_extra_info(info)


class PollingBackend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        return PollingStream(await self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        return PollingStream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
