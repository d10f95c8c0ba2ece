"""Requests whose answer is read whole (non-streamed completions, `/models`), on keep-alive connections of
this module's own, read by httptools.

Through httpx a whole answer cost ~0.9 ms of CPU (its client, httpcore's pool and h11's pure-Python parser): half
of all a bare FastAPI passthrough spends on the same answer, and the largest part of the proxy's own cost (issue
27). Here a request goes out in one write and its answer is read by httptools (llhttp, the parser uvicorn serves
with, already loaded): ~0.15 ms. aiohttp, which does the same in ~0.45 ms, adds ~8.5 MB to every proxy process,
against the memory target. Streams stay on httpx (`proxy/upstream/transport.py`), whose reads are at the floor.

The answer is an `httpx.Response` made from the status, the headers as sent and the body (decoded by httpx's own
decoders, as httpx would have), so every reader of an upstream answer is unchanged. Failures raise
`UpstreamFailure`s carrying httpx's name for the same cause (ConnectError, ConnectTimeout, ReadTimeout,
RemoteProtocolError), which the client maps to the proxy's errors as it maps httpx's.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import re
import ssl
import time
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import httptools
import httpx

from proxy.upstream.transport import tls_context

__all__ = ["UpstreamFailure", "WholeAnswers", "decoded_response", "usable_for"]

_MAX_CONNECTIONS = 1000
_KEEPALIVE_SECONDS = 4.0  # vLLM's uvicorn closes an idle keep-alive connection after 5 s


class UpstreamFailure(Exception):
    """A request that got no whole answer; `kind` is httpx's name for the cause."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def usable_for(base_url: str) -> bool:
    """Whether requests to `base_url` may go on this module's connections: http(s) with no proxy named for it in
    the environment (httpx honours those: such an upstream stays on httpx, to be reached the same way)."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    proxies = urllib.request.getproxies_environment()
    named = proxies.get(parts.scheme) or proxies.get("all")
    return not named or bool(urllib.request.proxy_bypass(parts.hostname))


class _Answer:
    """One answer being read: httptools' callbacks fill it. An interim (1xx) answer is skipped; anything after the
    final answer is not read as part of it."""

    __slots__ = ("body", "complete", "extra", "framed", "headers", "keep_alive", "limit", "parser", "size", "started",
                 "status", "too_large")

    def __init__(self, limit: int) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.limit, self.size, self.too_large = limit, 0, False
        self.started = False  # its headers are in
        self.complete = False
        self.extra = False  # bytes after the final answer: the connection is not reused
        self.framed = False  # a length or chunked coding ends it, not the connection's end
        self.parser: Any = None
        self.status = 0
        self.keep_alive = False  # read when the answer completes: the parser forgets it for the next message

    def on_message_begin(self) -> None:
        if self.complete:
            self.extra = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.complete:
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if not self.complete:
            self.started = True
            self.framed = any(n.lower() in (b"content-length", b"transfer-encoding") for n, _ in self.headers)

    def on_body(self, body: bytes) -> None:
        if not self.complete and not self.too_large:
            self.size += len(body)
            if self.size > self.limit:
                self.too_large, self.body = True, []  # read no further: `data_received` fails the answer
                return
            self.body.append(body)

    def on_message_complete(self) -> None:
        if self.complete:
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # interim: the final answer follows on the connection
            self.headers, self.body, self.started = [], [], False
            return
        self.complete, self.status, self.keep_alive = True, status, self.parser.should_keep_alive()


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.answer: _Answer | None = None
        self.done: asyncio.Future[None] | None = None
        self.usable = True  # nothing arrived while idle, not closed, no bytes after the answer
        self.idle_since = 0.0
        self.limit = 0
        self.progress: asyncio.Timeout | None = None  # the read timeout, pushed back by every read
        self.read_timeout = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport (uvloop's is no subclass)

    def start(self, done: asyncio.Future[None], read_timeout: float, limit: int) -> _Answer:
        answer = self.answer = _Answer(limit)
        answer.parser = httptools.HttpResponseParser(answer)
        self.done, self.read_timeout = done, read_timeout
        return answer

    def finish(self) -> None:
        self.answer, self.done, self.progress = None, None, None

    def data_received(self, data: bytes) -> None:
        answer, done = self.answer, self.done
        if answer is None or done is None or done.done():
            self.usable = False  # bytes nobody asked for: the connection is out of step
            return
        try:
            answer.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.usable = False
            if not answer.complete:
                done.set_exception(UpstreamFailure("RemoteProtocolError", f"unreadable answer: {exc}"))
                return
        if answer.too_large:
            self.usable = False
            done.set_exception(UpstreamFailure("TooLarge", f"the answer is larger than {answer.limit} bytes"))
            return
        if answer.complete:
            self.usable = self.usable and not answer.extra
            done.set_result(None)
        elif self.progress is not None:
            self.progress.reschedule(asyncio.get_running_loop().time() + self.read_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        done, answer = self.done, self.answer
        if done is None or done.done() or answer is None:
            return
        if answer.started and not answer.framed:  # the answer ran to the connection's end
            answer.complete, answer.status = True, answer.parser.get_status_code()
            done.set_result(None)
            return
        why = "the server closed the connection before the answer was complete" if answer.started \
            else "the server closed the connection without sending an answer"
        done.set_exception(UpstreamFailure("RemoteProtocolError", f"{why}{f': {exc}' if exc else ''}"))

    def close(self) -> None:
        self.usable = False
        if self.transport is not None:
            self.transport.close()


class WholeAnswers:
    """Keep-alive connections to one upstream origin and the requests made on them."""

    def __init__(self, base_url: str, *, connect_timeout: float, read_timeout: float,
                 default_headers: Mapping[str, str], max_bytes: int = 32 * 1024 * 1024) -> None:
        parts = urlsplit(base_url)
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._authority = parts.netloc.rpartition("@")[2].encode("ascii")
        self._ssl: ssl.SSLContext | None = tls_context() if parts.scheme == "https" else None
        self._connect_timeout, self._read_timeout = connect_timeout, read_timeout
        self._max_bytes = max_bytes
        self._default_headers = dict(default_headers)
        self._idle: collections.deque[_Connection] = collections.deque()
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def request(self, method: str, url: httpx.URL, headers: Mapping[str, str], content: bytes | None,
                      params: Any = None) -> httpx.Response:
        target = url.raw_path
        if params:
            target += (b"&" if b"?" in target else b"?") + urlencode(params, doseq=True).encode("ascii")
        head = _head(method, target, self._authority, {**self._default_headers, **headers}, content)
        self._bind()
        assert self._slots is not None
        async with self._slots:
            conn = self._reusable()
            if conn is None:
                conn = await self._connect()
            try:
                answer = await self._exchange(conn, head, content)
            except BaseException:
                conn.close()
                raise
            status = answer.status
            if conn.usable and answer.keep_alive:
                conn.finish()
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
            else:
                conn.close()
        # The headers as sent (no Content-Length of httpx's own), the body decoded as httpx decodes it.
        return decoded_response(status, answer.headers, answer.body, httpx.Request(method, url), self._max_bytes)

    async def aclose(self) -> None:
        while self._idle:
            self._idle.popleft().close()

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that made them (and only it may close them)
            self._idle.clear()
            self._loop, self._slots = loop, asyncio.Semaphore(_MAX_CONNECTIONS)

    def _reusable(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()  # the latest: the one least likely to be closed by the server meanwhile
            transport = conn.transport
            if conn.usable and transport is not None and not transport.is_closing() \
                    and now - conn.idle_since < _KEEPALIVE_SECONDS:
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        for attempt in (1, 2):  # a failed connect is tried once more, as httpx's transport does
            try:
                async with asyncio.timeout(self._connect_timeout):
                    _, conn = await loop.create_connection(
                        _Connection, self._host, self._port, ssl=self._ssl,
                        server_hostname=self._host if self._ssl is not None else None)
                return conn
            except TimeoutError:
                if attempt == 2:
                    raise UpstreamFailure("ConnectTimeout", "connecting timed out") from None
            except OSError as exc:
                if attempt == 2:
                    raise UpstreamFailure("ConnectError", str(exc) or type(exc).__name__) from None
        raise AssertionError("unreachable")

    async def _exchange(self, conn: _Connection, head: bytes, content: bytes | None) -> _Answer:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        answer = conn.start(done, self._read_timeout, self._max_bytes)
        transport = conn.transport
        assert transport is not None
        transport.writelines((head, content) if content else (head,))
        try:
            async with asyncio.timeout(self._read_timeout) as progress:
                conn.progress = progress
                await done
        except TimeoutError:
            raise UpstreamFailure("ReadTimeout", "the answer timed out") from None
        return answer


# Compressed bytes handed to a decoder at a time: gzip and deflate expand at most ~1,030 times, so one step
# adds at most ~4 MiB to what is held, and a bomb stops within a step of the limit.
_DECODE_STEP = 4096


class _Steps(httpx.SyncByteStream):
    def __init__(self, parts: list[bytes]) -> None:
        self._parts = parts

    def __iter__(self) -> Iterator[bytes]:
        for part in self._parts:
            for start in range(0, len(part), _DECODE_STEP):
                yield part[start:start + _DECODE_STEP]


def decoded_response(status: int, headers: Any, body: list[bytes], request: httpx.Request,
                     limit: int) -> httpx.Response:
    """An answer read whole as an `httpx.Response`, its body decoded as httpx decodes it (content-encoding),
    refused as `TooLarge` once the decoded bytes pass `limit` (a 1 MB gzip that expands to 1 GiB stops within
    a few MiB past the limit) and as `DecodingError` when its encoding does not decode."""
    response = httpx.Response(status, headers=headers, stream=_Steps(body), request=request)
    if "content-encoding" not in response.headers:
        content = b"".join(body)
        if len(content) > limit:
            raise UpstreamFailure("TooLarge", f"the answer is larger than {limit} bytes")
        response.stream = httpx.ByteStream(content)
        response.read()
        return response
    held = bytearray()
    try:
        for part in response.iter_bytes():
            held += part
            if len(held) > limit:
                raise UpstreamFailure("TooLarge", f"the answer decodes to more than {limit} bytes")
    except httpx.DecodingError as exc:  # a body its content-encoding does not decode
        raise UpstreamFailure("DecodingError", str(exc)) from None
    # What `Response.read()` keeps, read here step by step under the limit.
    response._content = bytes(held)
    return response


def _head(method: str, target: bytes, authority: bytes, headers: Mapping[str, str], content: bytes | None) -> bytes:
    lines = [method.encode("ascii"), b" ", target, b" HTTP/1.1\r\nhost: ", authority, b"\r\n"]
    for name, value in headers.items():
        if name.lower() in _FRAMING:
            continue
        # Values as the client's server read them (latin-1), so the bytes go on as they came.
        encoded = value.encode("latin-1", "replace")
        if not _sendable(name) or b"\r" in encoded or b"\n" in encoded or b"\x00" in encoded:
            raise UpstreamFailure("LocalProtocolError", f"a header that cannot be sent: {name[:80]!r}")
        lines += (name.encode("ascii"), b": ", encoded, b"\r\n")
    if content is not None or method in ("POST", "PUT", "PATCH"):
        lines += (b"content-length: ", str(len(content or b"")).encode("ascii"), b"\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


_FRAMING = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


@functools.lru_cache(maxsize=1024)
def _sendable(name: str) -> bool:
    return _TOKEN.fullmatch(name) is not None
