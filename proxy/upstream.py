"""The pooled HTTP client to the upstream; httpx errors are translated here and nowhere else."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from proxy.config import Settings
from proxy.errors import ProxyError, UpstreamProtocolError, UpstreamTimeout, UpstreamUnavailable

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


class Upstream:
    def __init__(self, settings: Settings) -> None:
        self.base_url = settings.upstream
        self._api_key = settings.upstream_api_key
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=settings.connect_timeout, read=settings.read_timeout,
                                  write=settings.read_timeout, pool=settings.read_timeout),
            # vLLM's uvicorn closes an idle keep-alive connection after 5 s: reusing one that old races with
            # that close and fails the request, so idle connections are dropped first.
            # (retries: a failed connect is tried once more.)
            transport=httpx.AsyncHTTPTransport(retries=1, limits=httpx.Limits(
                max_connections=1000, max_keepalive_connections=200, keepalive_expiry=4.0)),
            headers={"accept-encoding": "identity"},
        )

    def url(self, path: str) -> str:
        """`path` is the part after `/v1` (e.g. `/chat/completions`)."""
        return self.base_url + path

    def headers(self, incoming: Mapping[str, str]) -> dict[str, str]:
        return forward_headers(incoming, self._api_key)

    async def request(self, method: str, path: str, *, headers: Mapping[str, str], content: bytes | None = None,
                      params: Any = None) -> httpx.Response:
        try:
            return await self.client.request(method, self.url(path), headers=headers, content=content,
                                             params=params)
        except httpx.HTTPError as exc:
            raise map_httpx_error(exc, self.base_url) from exc

    async def open_stream(self, method: str, path: str, *, headers: Mapping[str, str],
                          content: bytes | None = None, params: Any = None) -> httpx.Response:
        """Sends the request and returns once the status and headers are in; the caller must aclose()."""
        request = self.client.build_request(method, self.url(path), headers=headers, content=content,
                                            params=params)
        try:
            return await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise map_httpx_error(exc, self.base_url) from exc

    async def iter_bytes(self, response: httpx.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            raise map_httpx_error(exc, self.base_url) from exc

    async def reachable(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            response = await self.client.get(self.url("/models"), timeout=2.0)
            return response.status_code < 500
        return False

    async def aclose(self) -> None:
        await self.client.aclose()
