"""The pooled HTTP clients to the upstreams; httpx errors are translated here and nowhere else.

With several upstreams (`upstreams:` in the config), `Upstreams` stands where one `Upstream` stood: the model
catalog picks the upstream that serves the request's model (`choose`), and every later call of the same
request goes to it. The choice is a context variable rather than an argument so that the handlers of each
route stay as they are: it is set in the request's own task and copied into the tasks it starts.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import http.cookiejar
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx

from proxy import telemetry
from proxy.config import Settings
from proxy.errors import ProxyError, UpstreamProtocolError, UpstreamTimeout, UpstreamUnavailable
from proxy.keys.tokens import KEY_PATTERN
from proxy.keys.tokens import PREFIX as KEY_PREFIX
from proxy.upstream.transport import upstream_transport
from proxy.upstream.whole import UpstreamFailure, WholeAnswers, decoded_response, usable_for

__all__ = ["Upstream", "Upstreams", "forward_headers", "map_failure", "map_httpx_error", "without_credentials"]

# Hop-by-hop and body-framing headers are the transport's business, not the client's.
_DROP_REQUEST_HEADERS = frozenset({
    "host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
    "proxy-authorization", "proxy-connection", "accept-encoding", "x-allowlist-policy",
})
# What identifies the client to an upstream: it goes to the upstream that serves the client's request and to
# no other; an upstream with a configured key gets that key and none of these.
CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "cookie"})
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


def map_failure(exc: UpstreamFailure, upstream: str) -> ProxyError:
    """An answer read whole that failed (proxy/upstream/whole.py), as `map_httpx_error` words httpx's failures."""
    if exc.kind in ("ConnectTimeout", "ReadTimeout"):
        return UpstreamTimeout(f"upstream {upstream} timed out ({exc.kind})")
    if exc.kind == "ConnectError":
        return UpstreamUnavailable(f"upstream {upstream} is unreachable: {exc}")
    if exc.kind == "RemoteProtocolError":
        return UpstreamProtocolError(f"upstream {upstream} broke the connection: {exc}")
    return UpstreamUnavailable(f"upstream {upstream} failed: {exc.kind}: {exc}")


# How long the probe of an upstream waits for its answer.
_PROBE_SECONDS = 2.0

# Methods whose answer `WholeAnswers` reads (HEAD's has no body, which its parser must be told).
_WHOLE_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})


def forward_headers(headers: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    # A project key is the proxy's credential (proxy/keys/): in whatever header a client put it, it stays here.
    out = {k: v for k, v in headers.items() if k.lower() not in _DROP_REQUEST_HEADERS
           and (KEY_PREFIX not in v or not KEY_PATTERN.search(v))}
    if api_key:
        out = without_credentials(out)
        out["authorization"] = f"Bearer {api_key}"
    return out


def without_credentials(headers: Mapping[str, str]) -> dict[str, str]:
    """`headers` less the client's credentials: for requests made to upstreams that do not serve its request."""
    return {k: v for k, v in headers.items() if k.lower() not in CREDENTIAL_HEADERS}


def response_headers(headers: httpx.Headers) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _DROP_RESPONSE_HEADERS}


class _KeepsNothing(http.cookiejar.CookieJar):
    def set_cookie(self, cookie: http.cookiejar.Cookie) -> None:
        return None

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None


class _NoCookies(httpx.Cookies):
    """The upstream's cookies are not the proxy's to keep: kept, one client's cookie would go out with
    every other client's requests. (Set-Cookie still reaches the client that got it.)"""

    def __init__(self) -> None:
        super().__init__(_KeepsNothing())

    def extract_cookies(self, response: httpx.Response) -> None:
        # Returns before httpx wraps the response and its request for http.cookiejar: ~0.1 ms an answer.
        return None


class _UpstreamClient(httpx.AsyncClient):
    """An httpx client that keeps no cookies (`_NoCookies`), whatever it is given."""

    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        return None


_NO_COOKIES = _NoCookies()


class Upstream:
    def __init__(self, settings: Settings, *, url: str | None = None, api_key: str | None = None) -> None:
        self.base_url = url.rstrip("/") if url else settings.upstream.url
        self._api_key = api_key if url else settings.upstream.api_key
        self.failures = 0  # requests that failed on the way (connect, read, protocol errors)
        self.client = _UpstreamClient(
            timeout=httpx.Timeout(connect=settings.upstream.connect_timeout, read=settings.upstream.read_timeout,
                                  write=settings.upstream.read_timeout, pool=settings.upstream.read_timeout),
            # vLLM's uvicorn closes an idle keep-alive connection after 5 s: reusing one that old races with
            # that close and fails the request, so idle connections are dropped first.
            # (retries: a failed connect is tried once more.)
            transport=upstream_transport(httpx.Limits(
                max_connections=1000, max_keepalive_connections=200, keepalive_expiry=4.0), retries=1),
            headers={"accept-encoding": "identity"},
        )
        # Answers read whole go on connections of their own where they can (proxy/upstream/whole.py): through
        # httpx such an answer cost half of what a bare passthrough spends on it.
        # An answer read whole is held in memory: its bytes, and what they decode to, are bounded like a body.
        self._max_bytes = settings.http.max_body_bytes
        self._whole = WholeAnswers(self.base_url, connect_timeout=settings.upstream.connect_timeout,
                                   read_timeout=settings.upstream.read_timeout,
                                   default_headers={"accept-encoding": "identity"}, max_bytes=self._max_bytes) \
            if usable_for(self.base_url) else None
        # Parsed once per path rather than per request: the routes that carry traffic are a handful, and
        # the bound keeps arbitrary passthrough paths from growing it.
        self._target = functools.lru_cache(maxsize=256)(lambda path: httpx.URL(self.url(path)))

    def _lost(self, exc: httpx.HTTPError | UpstreamFailure) -> ProxyError:
        # Counted so that whoever caches facts about the upstream (its vLLM version) reads them
        # again once it answers: an upstream that failed may come back as another server.
        self.failures += 1
        if isinstance(exc, UpstreamFailure):
            return map_failure(exc, self.base_url)
        return map_httpx_error(exc, self.base_url)

    def url(self, path: str) -> str:
        """`path` is the part after `/v1` (e.g. `/chat/completions`)."""
        return self.base_url + path

    def headers(self, incoming: Mapping[str, str]) -> dict[str, str]:
        return forward_headers(incoming, self._api_key)

    def _keyed(self, headers: Mapping[str, str]) -> Mapping[str, str]:
        # Headers made for all upstreams carry the client's key; this upstream's own key replaces it.
        if not self._api_key or (headers.get("authorization") == f"Bearer {self._api_key}"
                                 and not any(k.lower() in CREDENTIAL_HEADERS - {"authorization"} for k in headers)):
            return headers
        return forward_headers(headers, self._api_key)

    async def request(self, method: str, path: str, *, headers: Mapping[str, str], content: bytes | None = None,
                      params: Any = None) -> httpx.Response:
        headers = self._keyed(headers)
        timer = _AttemptTimer.start(self.base_url) if method == "POST" else None
        try:
            if self._whole is not None and method in _WHOLE_METHODS:
                response = await self._whole.request(method, self._target(path), headers, content, params)
            else:
                response = await self._bounded(method, path, headers, content, params)
        except (httpx.HTTPError, UpstreamFailure) as exc:
            if timer:
                timer.stop("error")
            raise self._lost(exc) from exc
        if timer:
            timer.stop("ok" if response.status_code == 200 else "http_error")
        return response

    async def _bounded(self, method: str, path: str, headers: Mapping[str, str], content: bytes | None,
                       params: Any) -> httpx.Response:
        """An answer read whole through httpx, its raw and decoded bytes bounded as `WholeAnswers` bounds them."""
        request = self.client.build_request(method, self._target(path), headers=headers, content=content,
                                            params=params)
        response = await self.client.send(request, stream=True)
        parts: list[bytes] = []
        size = 0
        try:
            async for chunk in response.aiter_raw():
                size += len(chunk)
                if size > self._max_bytes:
                    raise UpstreamFailure("TooLarge", f"the answer is larger than {self._max_bytes} bytes")
                parts.append(chunk)
        finally:
            await response.aclose()
        return decoded_response(response.status_code, response.headers.raw, parts, request, self._max_bytes)

    async def open_stream(self, method: str, path: str, *, headers: Mapping[str, str],
                          content: bytes | None = None, params: Any = None) -> httpx.Response:
        """Sends the request and returns once the status and headers are in; the caller must aclose()."""
        headers = self._keyed(headers)
        request = self.client.build_request(method, self._target(path), headers=headers, content=content,
                                            params=params)
        timer = _AttemptTimer.start(self.base_url) if method == "POST" else None
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            if timer:
                timer.stop("error")
            raise self._lost(exc) from exc
        if timer:
            response.stream = _TimedStream(response.stream, timer,
                                           "ok" if response.status_code == 200 else "http_error")
        return response

    @contextlib.contextmanager
    def errors_translated(self, response: httpx.Response | None = None) -> Iterator[None]:
        """httpx errors raised inside become the proxy's own. For loops over a response's body, so that
        each chunk is not handed through one more generator; the attempt of `response` is timed as failed."""
        try:
            yield
        except BaseException as exc:
            # GeneratorExit: the reader stopped between chunks (the client left), not a read that failed.
            stream = response.stream if response is not None else None
            if isinstance(stream, _TimedStream) and not isinstance(exc, GeneratorExit):
                stream.outcome = "error"
            if isinstance(exc, httpx.HTTPError):
                raise self._lost(exc) from exc
            raise

    async def iter_bytes(self, response: httpx.Response) -> AsyncIterator[bytes]:
        with self.errors_translated(response):
            async for chunk in response.aiter_raw():
                yield chunk

    async def probe(self) -> str | None:
        """Ask `GET /v1/models`: None when the upstream answers (any status under 500), else why not, in a few
        words. The one probe of an upstream: the banner, /health, the dashboard and the background check use it."""
        try:
            response = await self.client.get(self.url("/models"), headers=self._keyed({}), timeout=_PROBE_SECONDS)
        except httpx.TimeoutException:
            error: str | None = f"no answer within {_PROBE_SECONDS:g} s"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        else:
            error = None if response.status_code < 500 else f"answered HTTP {response.status_code}"
        telemetry.emit(telemetry.UpstreamProbed(self.base_url, error is None))
        return error

    async def aclose(self) -> None:
        if self._whole is not None:
            await self._whole.aclose()
        await self.client.aclose()


class _AttemptTimer:
    """Times one upstream attempt of a request whose model is known (`telemetry.UpstreamAttempt`)."""

    def __init__(self, model: str, upstream: str) -> None:
        self.model, self.upstream = model, upstream
        self.started = time.perf_counter()
        self.done = False

    @classmethod
    def start(cls, upstream: str) -> _AttemptTimer | None:
        model = _model.get()
        return cls(model, upstream) if model is not None else None

    def stop(self, outcome: str) -> None:
        if not self.done:
            self.done = True
            seconds = time.perf_counter() - self.started
            telemetry.emit(telemetry.UpstreamAttempt(self.model, self.upstream, outcome, seconds))


class _TimedStream(httpx.AsyncByteStream):
    """A streamed body that stops its attempt's timer when it is closed: at the last byte read, or at
    the error that broke it off (`errors_translated` says so). Iterated as the body it wraps: no generator
    between each chunk and its reader."""

    def __init__(self, inner: Any, timer: _AttemptTimer, outcome: str) -> None:
        self._inner, self._timer, self.outcome = inner, timer, outcome

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._inner.__aiter__()

    async def aclose(self) -> None:
        self._timer.stop(self.outcome)
        await self._inner.aclose()


_chosen: contextvars.ContextVar[Upstream | None] = contextvars.ContextVar("allowlist_proxy_upstream", default=None)
_model: contextvars.ContextVar[str | None] = contextvars.ContextVar("allowlist_proxy_model", default=None)


class Upstreams:
    """Several upstreams behind one interface: each call goes to the one chosen for the current request
    (by `ModelCatalog.resolve`), else to the first."""

    def __init__(self, settings: Settings) -> None:
        self.configs = settings.upstream.routes()
        self.all = [Upstream(settings, url=c.url, api_key=c.api_key) for c in self.configs]

    @property
    def current(self) -> Upstream:
        return _chosen.get() or self.all[0]

    def choose(self, upstream: Upstream, model: str | None = None) -> None:
        _chosen.set(upstream)
        _model.set(model)

    @property
    def base_url(self) -> str:
        return self.current.base_url

    @property
    def client(self) -> httpx.AsyncClient:
        return self.current.client

    @property
    def failures(self) -> int:
        """Failed requests over all upstreams, for readers that notice an upstream coming back."""
        return sum(getattr(upstream, "failures", 0) for upstream in self.all)

    def url(self, path: str) -> str:
        return self.current.url(path)

    def headers(self, incoming: Mapping[str, str]) -> dict[str, str]:
        if len(self.all) == 1:
            return self.all[0].headers(incoming)
        return forward_headers(incoming, None)  # each upstream puts its own key in when it sends

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return await self.current.request(method, path, **kwargs)

    async def open_stream(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return await self.current.open_stream(method, path, **kwargs)

    def errors_translated(self, response: httpx.Response | None = None) -> contextlib.AbstractContextManager[None]:
        return self.current.errors_translated(response)

    def iter_bytes(self, response: httpx.Response) -> AsyncIterator[bytes]:
        return self.current.iter_bytes(response)

    async def aclose(self) -> None:
        for upstream in self.all:
            await upstream.aclose()
