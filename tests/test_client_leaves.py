"""`Exchange.unless_client_leaves`: the upstream attempt runs in the request's own task, at once, and a client that
disconnects meanwhile cancels it (ClientGone, recorded)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.enforce.exchange import Exchange
from proxy.errors import ClientGone


class _Client:
    """A request whose `receive` says `http.disconnect` once `leave` is set."""

    def __init__(self) -> None:
        self.leave = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.leave.wait()
        return {"type": "http.disconnect"}


class _Record:
    outcome = "ok"

    def fail(self, outcome: str, error: str, status: int | None = None) -> None:
        self.outcome = outcome


def _exchange() -> Any:
    return SimpleNamespace(client=_Client(), client_left=False, record=_Record())


async def test_the_attempt_runs_at_once_in_the_requests_own_task():
    ex = _exchange()
    caller = asyncio.current_task()
    turned: list[bool] = []

    async def start() -> str:
        assert asyncio.current_task() is caller
        assert turned == []  # begun before the loop ran anything else
        return "answer"

    asyncio.get_running_loop().call_soon(turned.append, True)
    assert await Exchange.unless_client_leaves(ex, start) == "answer"
    await asyncio.sleep(0.01)
    assert ex.record.outcome == "ok" and asyncio.current_task().cancelling() == 0


async def test_a_client_that_leaves_cancels_the_attempt():
    ex = _exchange()
    cancelled: list[bool] = []

    async def start() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    asyncio.get_running_loop().call_later(0.05, ex.client.leave.set)
    with pytest.raises(ClientGone):
        await Exchange.unless_client_leaves(ex, start)
    assert cancelled == [True] and ex.client_left and ex.record.outcome == "client_disconnected"
    assert asyncio.current_task().cancelling() == 0  # the watcher's cancel was answered, not left pending
    await asyncio.sleep(0)  # and nothing cancels this task later


async def test_someone_elses_cancel_is_passed_on():
    ex = _exchange()

    async def start() -> str:
        await asyncio.sleep(30)
        return "never"

    task = asyncio.ensure_future(Exchange.unless_client_leaves(ex, start))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not ex.client_left
