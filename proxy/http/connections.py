"""Limits on client connections, enforced in uvicorn's HTTP protocol where a connection lives.

uvicorn closes a keep-alive connection that idles after a response, but not one that never sends a complete
request head, nor a body that stops arriving; and its `limit_concurrency` answers 503 to real requests as soon
as enough *idle* connections are open. Here:
- a connection without a complete request head `header_timeout_seconds` after it opened (or after its last
  response) is closed;
- a request body with no new bytes for `body_timeout_seconds` closes the connection (the app sees a disconnect);
- idle keep-alive connections close after `keepalive_timeout_seconds` (uvicorn's own timer);
- a request whose framing RFC 9112 refuses (proxy/http/framing.py) is answered 400/501 and closed;
- beyond `max_connections_per_client` connections of one peer address, that peer's oldest idle one is
  closed, else the new one (so a peer that trickles bodies cannot take every slot);
- beyond `max_connections` open connections, the oldest idle one is closed to make room; when none is idle,
  the new connection is closed at once.
Each limit, when it triggers, is logged and counted in `allowlist_proxy_connection_limits{limit}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import time
from typing import Any

from proxy import telemetry
from proxy.config import Settings
from proxy.http.framing import framing_problem, refusal_bytes
from proxy.logs import get_logger

__all__ = ["guarded_protocol", "raise_open_file_limit", "server_options"]

log = get_logger("proxy.http.connections")


class _Refused(Exception):
    """Raised from a parser callback to stop reading a refused request."""


def _base_protocol() -> type[asyncio.Protocol]:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    except ImportError:  # httptools not installed: uvicorn's pure-Python parser
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol


def guarded_protocol(settings: Settings) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class with the limits of `settings`."""
    base: Any = _base_protocol()
    header_timeout = settings.http.header_timeout_seconds
    body_timeout = settings.http.body_timeout_seconds
    max_connections = max(1, settings.http.max_connections)
    per_client = max(1, settings.http.max_connections_per_client)

    class GuardedProtocol(base):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.opened_at = time.monotonic()
            self._refused = False
            self._seen_cycle: Any = None
            self._timer: asyncio.TimerHandle | None = None
            self._arm(header_timeout, "header_timeout")
            peer = transport.get_extra_info("peername")
            self.peer = peer[0] if isinstance(peer, tuple) and peer else None
            if self.peer is not None and per_client < max_connections and self._over_client_budget():
                return
            if len(self.connections) > max_connections:
                self._make_room()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # the refusal is written; what follows is not read
            super().data_received(data)
            cycle = self.cycle
            if cycle is None or cycle.response_complete:
                return  # still waiting for a head: its timer runs on
            if cycle is not self._seen_cycle:
                self._seen_cycle = cycle
                self._disarm()
            if cycle.more_body:
                self._arm(body_timeout, "body_timeout")  # restarted by every piece of the body
            elif self._timer is not None:
                self._disarm()

        def on_headers_complete(self) -> None:
            problem = framing_problem(self.headers, self.parser.get_http_version())
            if problem is not None:
                self._refused = True
                _count("framing", "a request with refused framing (Transfer-Encoding / Content-Length)")
                self.transport.write(refusal_bytes(*problem))
                self.transport.close()
                raise _Refused  # stops llhttp; uvicorn's own 400 is suppressed below
            super().on_headers_complete()

        def send_400_response(self, msg: str) -> None:
            if not self._refused:
                super().send_400_response(msg)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm(header_timeout, "header_timeout")  # the next head, if any, must come in time

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def timeout_keep_alive_handler(self) -> None:
            if not self.transport.is_closing():
                _count("idle", "an idle keep-alive connection was closed")
            super().timeout_keep_alive_handler()

        # -- helpers

        @property
        def idle(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self, seconds: float, limit: str) -> None:
            self._disarm()
            self._timer = self.loop.call_later(seconds, self._expire, limit)

        def _disarm(self) -> None:
            timer = getattr(self, "_timer", None)
            if timer is not None:
                timer.cancel()
                self._timer = None

        def _expire(self, limit: str) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            if limit == "header_timeout" and not self.idle:
                return
            _count(limit, "a client connection was closed: " + limit.replace("_", " "))
            self.transport.close()

        def _over_client_budget(self) -> bool:
            # One peer trickling bodies must not hold every slot: past its budget its own oldest idle
            # connection makes room, else the new one is closed; other peers keep theirs.
            own = [c for c in self.connections if getattr(c, "peer", None) == self.peer and c is not self
                   and not c.transport.is_closing()]
            if len(own) < per_client:
                return False
            idle = [c for c in own if getattr(c, "idle", False)]
            if idle:
                _count("per_client", "over max_connections_per_client: the peer's oldest idle connection was closed")
                min(idle, key=lambda c: getattr(c, "opened_at", 0.0)).transport.close()
                return False
            _count("per_client", "over max_connections_per_client and none idle: a new connection was refused")
            self.transport.close()
            return True

        def _make_room(self) -> None:
            idle = [c for c in self.connections if c is not self and getattr(c, "idle", False)
                    and not c.transport.is_closing()]
            if idle:
                oldest = min(idle, key=lambda c: getattr(c, "opened_at", 0.0))
                _count("too_many", "over max_connections: the oldest idle connection was closed")
                oldest.transport.close()
                return
            _count("too_many", "over max_connections and none idle: a new connection was refused")
            self.transport.close()

    return GuardedProtocol


_last_logged: dict[str, float] = {}


def _count(limit: str, message: str) -> None:
    telemetry.emit(telemetry.ConnectionLimited(limit))
    now = time.monotonic()
    if now - _last_logged.get(limit, 0.0) >= 1.0:  # at most one line a second per limit, however many trigger
        _last_logged[limit] = now
        # An idle keep-alive closed is routine (every client that pauses): below `info`; the others are limits hit.
        emit = log.debug if limit == "idle" else log.warning
        emit("connection.limit", limit=limit, message=message)


def raise_open_file_limit(wanted: int) -> None:
    """Let the process hold `wanted` connections plus its own files, as far as the hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted + 256
    if soft < target:
        new = target if hard == resource.RLIM_INFINITY else min(target, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def server_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of uvicorn.Config that carry the connection limits."""
    return {"http": guarded_protocol(settings), "timeout_keep_alive": settings.http.keepalive_timeout_seconds}
