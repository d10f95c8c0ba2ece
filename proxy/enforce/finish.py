"""The end of an exchange, however it came: the record says what the client got, and the request ends
through `Services.finish`."""

from __future__ import annotations

import sys
from collections.abc import Callable

import anyio
import httpx

from proxy.enforce.exchange import Exchange
from proxy.errors import ClientGone, ProxyError, StoreUnavailable
from proxy.record import RequestRecord

__all__ = ["end_stream", "finish_exchange"]


def finish_exchange(ex: Exchange) -> None:
    """Ends the exchange's request through `Services.finish`, the one place a request ends.

    Called from `finally` blocks: when an exception is on its way to the client, the record says what the
    client will get (its status and error), not what the upstream had answered."""
    _note_exception(ex.record, sys.exc_info()[1])
    ex.state.finish(ex.record)


async def end_stream(ex: Exchange, *, done: bool, upstream: httpx.Response | None,
                     then: Callable[[], None] | None = None) -> None:
    """The end of a streamed exchange, however it came (call it from `finally`): a client that left before the
    end is on record as such; then, shielded from the cancellation, the upstream closed, `then` (what the
    route still records) and the request ended."""
    if not done and ex.record.outcome == "ok":
        ex.record.fail("client_disconnected", "the client went away before the stream ended", 499)
    with anyio.CancelScope(shield=True):
        if upstream is not None:
            await upstream.aclose()
        if then is not None:
            then()
        finish_exchange(ex)


def _note_exception(record: RequestRecord, exc: BaseException | None) -> None:
    if exc is None or record.saved or isinstance(exc, ClientGone | StoreUnavailable):
        return  # nothing in flight, or already recorded as what it is
    if isinstance(exc, ProxyError):
        outcome = "upstream_error" if record.outcome == "ok" and exc.status_code >= 500 else record.outcome
        record.fail(outcome, exc.message, exc.status_code)
    elif isinstance(exc, Exception):
        record.fail("internal_error", f"{type(exc).__name__}: {str(exc)[:500]}", 500)
