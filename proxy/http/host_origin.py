"""Who may reach the proxy through a browser: the Host and Origin rules, checked before any route runs.

- **Host.** A web page can reach a proxy on 127.0.0.1 by DNS rebinding: its own name resolves to 127.0.0.1,
  and the browser treats the proxy's answers as the page's own. Such a request carries the page's name in
  `Host`, so the proxy serves only the names it is bound to: the address the connection arrived on (with
  its port), `localhost` / `127.0.0.1` / `[::1]` on a loopback address, and the `allowed_hosts` setting.
- **Origin.** Any page can send a CORS-simple request (a `text/plain` POST) to 127.0.0.1; the browser only
  hides the answer, the request still reaches the upstream and runs. A request that carries an `Origin`
  is served only when that origin is the proxy's own (the dashboard) or listed in `allowed_origins`.
  A request without `Origin` is not from a cross-origin page (browsers send it on every cross-origin
  request and on every POST), so it is served: CLI agents and SDKs send none. A browser's
  `Sec-Fetch-Site: cross-site|same-site` without an allowed Origin is refused too.
- **One value per deciding header.** A header the proxy reads one value of (credentials, content type, the
  policy and session headers, the user agent that picks a tool profile) sent twice could be read as the
  first by the proxy and the last by another reader: 400 `duplicate_header`.
Each answers in the one error shape (400 `invalid_host` / `duplicate_header`, 403 `origin_not_allowed`),
before the upstream.
"""

from __future__ import annotations

import functools
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from proxy.config import Settings
from proxy.errors import error_body

__all__ = ["HostOriginGuard", "host_allowed", "origin_allowed"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_SINGLE_HEADERS = ("authorization", "x-api-key", "api-key", "content-type", "x-allowlist-policy", "user-agent")


def _split_host(value: str) -> tuple[str, int | None] | None:
    """`name[:port]` of a Host header, lower-cased; None when it is not one."""
    value = value.strip().lower()
    if not value or any(c in value for c in " \t/\\@?#"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[: end + 1], value[end + 1:]
    else:
        name, colon, port_text = value.partition(":")
        rest = colon + port_text
    if not rest:
        return name, None
    if not rest.startswith(":") or not rest[1:].isdigit() or len(rest) > 6:
        return None
    return name, int(rest[1:])


def _literal(address: str) -> str:
    """The form an address takes in a Host header: IPv6 in brackets."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address.lower()
    return f"[{ip.compressed}]" if ip.version == 6 else ip.compressed


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address.lower() == "localhost"


def host_allowed(host_header: str | None, server: tuple[str, int] | None, allowed: list[str]) -> bool:
    """True when `host_header` names this proxy: the local address `server` the connection arrived on (its port
    too), the loopback names on a loopback address, or an `allowed` entry (`name` any port, `name:port`, `*`)."""
    if "*" in allowed:
        return True
    if not host_header:
        return False  # HTTP/1.1 requires Host; without it nothing says which site the request was meant for
    parsed = _split_host(host_header)
    if parsed is None:
        return False
    name, port = parsed
    for entry in allowed:
        wanted = _split_host(entry)
        if wanted and wanted[0] == name and (wanted[1] is None or wanted[1] == port):
            return True
    if server is None:
        return False
    address, local_port = server
    # A browser writes the port whenever it is not 80, so a Host without one never comes from a page that
    # reached this port under another name.
    if port is not None and port != local_port:
        return False
    names = {_literal(address)}
    if _is_loopback(address):
        names.update(_LOOPBACK_NAMES)
    return name in names


def origin_allowed(origin: str, host_header: str, allowed: list[str]) -> bool:
    """True when `origin` is the proxy's own (same scheme-less host as the served Host) or listed."""
    origin = origin.strip().lower().rstrip("/")
    if "*" in allowed or origin in allowed:
        return True
    scheme, sep, rest = origin.partition("://")
    return bool(sep) and scheme in ("http", "https") and rest == host_header.strip().lower()


class HostOriginGuard:
    """ASGI middleware: refuses a request whose Host the proxy does not serve, or whose Origin it does not allow."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.allowed_hosts = [h.strip().lower() for h in settings.http.allowed_hosts]
        self.allowed_origins = [o.strip().lower().rstrip("/") for o in settings.http.allowed_origins]
        # Headers the proxy reads one value of while the upstream (or the proxy's forwarding) may take another.
        named = settings.policy
        self.single = {h.encode() for h in (*_SINGLE_HEADERS, *named.session_header,
                                            *([named.project_root_header] if named.project_root_header else []))}

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message, code = refusal
        body = json.dumps(error_body(message, "invalid_request_error" if status == 400 else "permission_error",
                                     code=code)).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    def refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        hosts: list[str] = []
        origins: list[str] = []
        fetch_site = ""
        seen: set[bytes] = set()
        for key, value in scope["headers"]:
            if key in self.single:
                if key in seen:
                    return 400, f"more than one {key.decode()} header: send it once", "duplicate_header"
                seen.add(key)
            if key == b"host":
                hosts.append(value.decode("latin-1"))
            elif key == b"origin":
                origins.append(value.decode("latin-1"))
            elif key == b"sec-fetch-site":
                fetch_site = value.decode("latin-1").strip().lower()
        server = scope.get("server")
        if len(hosts) != 1 or not _host_allowed(hosts[0], tuple(server) if server else None, tuple(self.allowed_hosts)):
            shown = hosts[0][:100] if len(hosts) == 1 else f"{len(hosts)} Host headers"
            return 400, (f"this proxy does not serve the host {shown!r}: add it to allowed_hosts if it is this "
                         "proxy's name"), "invalid_host"
        if len(origins) > 1:
            return 403, "more than one Origin header", "origin_not_allowed"
        if origins:
            if not origin_allowed(origins[0], hosts[0], self.allowed_origins):
                return 403, (f"requests from the origin {origins[0][:100]!r} are not allowed: add it to "
                             "allowed_origins to serve that page"), "origin_not_allowed"
        elif fetch_site in ("cross-site", "same-site"):
            return 403, "a browser request from another site is not allowed", "origin_not_allowed"
        return None


@functools.lru_cache(maxsize=1024)
def _host_allowed(host_header: str, server: tuple[str, int] | None, allowed: tuple[str, ...]) -> bool:
    # Every request asks again with the same Host: parsing it (and the address) each time was a tenth of a ms.
    return host_allowed(host_header, server, list(allowed))
