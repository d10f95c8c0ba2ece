"""The addresses a URL's host name resolves to, at judging time (`urls.resolve`).

`intranet.corp.example` or an attacker's `x.example` may resolve to `10.0.0.5` or `127.0.0.1`: refused
by its answer, not its spelling. Lookups run in at most `_WORKERS` daemon threads of their own and are kept per name
(`_KEPT_SECONDS`; a missing name `_KEPT_MISSING_SECONDS`), so an agent's repeated fetches of one site cost
a dictionary lookup. A lookup that has not answered within the policy's `resolve_timeout_ms` is refused
(a slow answer is what a rebinding server would give); it goes on in its thread and fills the cache, so
a retry finds it. A name that does not exist passes: nothing can be fetched from it (where the agent's
resolver sees the same names). What this cannot see: an answer that changes between the proxy's lookup
and the client's (DNS rebinding, split-horizon DNS); `deny_hosts` and an egress firewall are for those.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

__all__ = ["NOT_RESOLVED", "clear", "lookup", "resolver"]

_KEPT_SECONDS = 60.0
_KEPT_MISSING_SECONDS = 10.0
_KEPT_NAMES = 4096
_WORKERS = 4
# The answer when the name could not be resolved in time (or the lookups are all busy): refused.
NOT_RESOLVED: tuple[str, ...] = ("unresolved",)


def _getaddrinfo(host: str) -> tuple[str, ...]:
    """Every address `host` resolves to; () when the name does not exist."""
    try:
        answers = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as error:
        if error.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
            return ()
        raise
    return tuple(sorted({str(answer[4][0]).split("%", 1)[0] for answer in answers}))


# What resolves a name: replaced in tests (no network there) by a function of the same shape.
resolver: Callable[[str], tuple[str, ...]] = _getaddrinfo

_lock = threading.Lock()
_kept: dict[str, tuple[float, tuple[str, ...]]] = {}
_pending: dict[str, Future[tuple[str, ...]]] = {}


def clear() -> None:
    with _lock:
        _kept.clear()


def _run(host: str, future: Future[tuple[str, ...]]) -> None:
    try:
        answer = resolver(host)
    except Exception:
        answer = NOT_RESOLVED
    with _lock:
        _pending.pop(host, None)
        if answer is not NOT_RESOLVED:
            if len(_kept) >= _KEPT_NAMES:
                _kept.clear()
            _kept[host] = (time.monotonic(), answer)
    future.set_result(answer)


def lookup(host: str, timeout: float) -> tuple[str, ...]:
    """The addresses of `host` (() when it does not exist), or NOT_RESOLVED when no answer came in time."""
    now = time.monotonic()
    with _lock:
        kept = _kept.get(host)
        if kept is not None and now - kept[0] < (_KEPT_SECONDS if kept[1] else _KEPT_MISSING_SECONDS):
            return kept[1]
        future = _pending.get(host)
        if future is None:
            if len(_pending) >= _WORKERS:
                return NOT_RESOLVED  # every lookup thread waits on a slow name: refuse, never queue behind it
            future = Future()
            _pending[host] = future
            # A daemon thread: a lookup that hangs never holds up the process's exit (`allowlist-proxy check`).
            threading.Thread(target=_run, args=(host, future), name="allowlist-resolve", daemon=True).start()
    try:
        return future.result(timeout=timeout)
    except FutureTimeout:
        return NOT_RESOLVED
    except Exception:
        return NOT_RESOLVED
