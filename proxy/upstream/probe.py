"""Whether each upstream answers, asked in the background and not read off the traffic.

Every `upstream_probe_seconds` each upstream gets `GET /v1/models` (`Upstream.probe`); the answer feeds
`allowlist_proxy_upstream_up{upstream}` (through `telemetry.UpstreamProbed`) so the gauge exists from the first
seconds for every configured upstream, a fixed `models:` list or not, and follows an idle upstream that goes
down or comes back. The start-up banner, `/health` and the dashboard ask the same probe (`check`), so they
name the same upstreams. A check already running is joined rather than repeated: a load balancer and a
dashboard asking at once cost each upstream one request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from proxy.logs import get_logger
from proxy.tasks import cancel_and_wait, every

__all__ = ["ProbeResult", "UpstreamProbe"]

log = get_logger("proxy.upstream.probe")


class _Probed(Protocol):
    base_url: str

    async def probe(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One upstream's last answer: `error` says why it is down (None: it answered)."""

    url: str
    error: str | None
    at: float  # time.time() of the check

    @property
    def up(self) -> bool:
        return self.error is None

    def describe(self) -> dict[str, object]:
        return {"url": self.url, "reachable": self.up, "error": self.error}


class UpstreamProbe:
    def __init__(self, upstreams: Sequence[_Probed], *, interval_seconds: float) -> None:
        self._upstreams = list(upstreams)
        self.interval_seconds = interval_seconds
        self._last: list[ProbeResult] | None = None
        self._running: asyncio.Future[list[ProbeResult]] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def last(self) -> list[ProbeResult] | None:
        """The latest check's results, in the configured order (None before the first)."""
        return self._last

    async def check(self) -> list[ProbeResult]:
        """Ask every upstream now (at once, not one after another); joins a check already running."""
        running = self._running
        if running is None:
            running = self._running = asyncio.ensure_future(self._check())
            running.add_done_callback(self._done)
        # Shielded: a /health client that leaves does not cancel the check others wait for.
        return await asyncio.shield(running)

    def _done(self, future: asyncio.Future[list[ProbeResult]]) -> None:
        self._running = None
        if not future.cancelled():
            future.exception()  # retrieved: a check nobody waits for any more fails quietly

    async def _check(self) -> list[ProbeResult]:
        errors = await asyncio.gather(*(upstream.probe() for upstream in self._upstreams))
        now = time.time()
        results = [ProbeResult(u.base_url, e, now) for u, e in zip(self._upstreams, errors, strict=True)]
        # Changes only: the first check's findings are the banner's to say.
        previous = {r.url: r.up for r in self._last or ()}
        for result in results:
            if previous.get(result.url, result.up) != result.up:
                (log.info if result.up else log.warning)(
                    "upstream.up" if result.up else "upstream.down", upstream=result.url, error=result.error)
        self._last = results
        return results

    async def _check_quietly(self) -> None:
        with contextlib.suppress(Exception):  # a probe that fails is an upstream that is down, said above
            await self.check()

    async def start(self) -> None:
        """Check once before returning, then every `interval_seconds` in the background: the first scrape after
        start-up already has every upstream's gauge at its true value (one probe timeout at most, upstreams
        asked at once)."""
        if self._task is None:
            await self._check_quietly()
            self._task = asyncio.create_task(every(self.interval_seconds, self._check_quietly), name="upstream-probe")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        running = self._running
        if running is not None and not running.done():
            running.cancel()
