"""The pooled HTTP client to the upstream; httpx errors are translated here and nowhere else."""

from __future__ import annotations

import contextlib
import functools
import http.cookiejar
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx

from proxy.config import Settings
from proxy.errors import ProxyError, UpstreamProtocolError, UpstreamTimeout, UpstreamUnavailable
from proxy.upstream_transport import upstream_transport

__all__ = ["Upstream", "forward_headers", "map_httpx_error"]

# Hop-by-hop and body-framing headers are the transport's business, not the client's.
_DROP_REQUEST_HEADERS = frozenset({
    "host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
    "proxy-authorization", "proxy-connection", "accept-encoding", "x-allowlist-policy",
})
_DROP_RESPONSE_HEADERS = frozenset({
    "content-length", "connection", "keep-alive", "transfer-encoding", "content-encoding", "date", "server",
})


def map_httpx_error(exc: httpx.HTTPError, upstream: str) -> ProxyError:
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"upstream {upstream} timed out ({type(exc).__name__})")
    if isinstance(exc, httpx.ConnectError):
        return UpstreamUnavailable(f"upstream {upstream} is unreachable: {exc}")
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return UpstreamProtocolError(f"upstream {upstream} broke the connection: {exc}")
    return UpstreamUnavailable(f"upstream {upstream} failed: {type(exc).__name__}: {exc}")


def forward_headers(headers: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    out = {k: v for k, v in headers.items() if k.lower() not in _DROP_REQUEST_HEADERS}
    if api_key:
        out = {k: v for k, v in out.items() if k.lower() != "authorization"}
        out["authorization"] = f"Bearer {api_key}"
    return out


def response_headers(headers: httpx.Headers) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _DROP_RESPONSE_HEADERS}


class _NoCookies(http.cookiejar.CookieJar):
    """The upstream's cookies are not the proxy's to keep: kept, one client's cookie would go out with
    every other client's requests. (Set-Cookie still reaches the client that got it.) Not parsing them
    also spares the cookie machinery httpx runs on every response."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None


class Upstream:
    def __init__(self, settings: Settings) -> None:
        self.base_url = settings.upstream
        self._api_key = settings.upstream_api_key
        self.failures = 0  # requests that failed on the way (connect, read, protocol errors)
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=settings.connect_timeout, read=settings.read_timeout,
                                  write=settings.read_timeout, pool=settings.read_timeout),
            # vLLM's uvicorn closes an idle keep-alive connection after 5 s: reusing one that old races with
            # that close and fails the request, so idle connections are dropped first.
            # (retries: a failed connect is tried once more.)
            transport=upstream_transport(httpx.Limits(
                max_connections=1000, max_keepalive_connections=200, keepalive_expiry=4.0), retries=1),
            headers={"accept-encoding": "identity"},
            cookies=_NoCookies(),
        )
        # Parsed once per path rather than per request: the routes that carry traffic are a handful, and
        # the bound keeps arbitrary passthrough paths from growing it.
        self._target = functools.lru_cache(maxsize=256)(lambda path: httpx.URL(self.url(path)))

    def _lost(self, exc: httpx.HTTPError) -> ProxyError:
        # Counted so that whoever caches facts about the upstream (its vLLM version) reads them
        # again once it answers: an upstream that failed may come back as another server.
        self.failures += 1
        return map_httpx_error(exc, self.base_url)

    def url(self, path: str) -> str:
        """`path` is the part after `/v1` (e.g. `/chat/completions`)."""
        return self.base_url + path

    def headers(self, incoming: Mapping[str, str]) -> dict[str, str]:
        return forward_headers(incoming, self._api_key)

    async def request(self, method: str, path: str, *, headers: Mapping[str, str], content: bytes | None = None,
                      params: Any = None) -> httpx.Response:
        try:
            return await self.client.request(method, self._target(path), headers=headers, content=content,
                                             params=params)
        except httpx.HTTPError as exc:
            raise self._lost(exc) from exc

    async def open_stream(self, method: str, path: str, *, headers: Mapping[str, str],
                          content: bytes | None = None, params: Any = None) -> httpx.Response:
        """Sends the request and returns once the status and headers are in; the caller must aclose()."""
        request = self.client.build_request(method, self._target(path), headers=headers, content=content,
                                            params=params)
        try:
            return await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise self._lost(exc) from exc

    @contextlib.contextmanager
    def errors_translated(self) -> Iterator[None]:
        """httpx errors raised inside become the proxy's own. For loops over a response's body, so that
        each chunk is not handed through one more generator."""
        try:
            yield
        except httpx.HTTPError as exc:
            raise self._lost(exc) from exc

    async def iter_bytes(self, response: httpx.Response) -> AsyncIterator[bytes]:
        with self.errors_translated():
            async for chunk in response.aiter_raw():
                yield chunk

    async def reachable(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            response = await self.client.get(self.url("/models"), timeout=2.0)
            return response.status_code < 500
        return False

    async def aclose(self) -> None:
        await self.client.aclose()
