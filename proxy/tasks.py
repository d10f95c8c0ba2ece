"""A service's background task: repeated on an interval, and at the end cancelled and waited for until it has
ended."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["cancel_and_wait", "every"]


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (None: nothing to do) and wait until it has ended: its CancelledError is how it ends, not an
    error to report."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def every(seconds: float, action: Callable[[], Awaitable[object]]) -> None:
    """Wait `seconds`, run `action`, and again, until cancelled (the first run is the caller's to do, if any)."""
    while True:
        await asyncio.sleep(seconds)
        await action()
