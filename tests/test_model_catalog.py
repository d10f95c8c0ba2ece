"""The model catalog asks the upstream once per key however many requests wait for the answer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from proxy.errors import UpstreamUnavailable
from proxy.upstream.model_catalog import ModelCatalog


class SlowUpstream:
    def __init__(self, *, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    async def request(self, method: str, path: str, **_: Any) -> httpx.Response:
        self.calls += 1
        await asyncio.sleep(0.05)
        if self.fail:
            raise UpstreamUnavailable("down")
        return httpx.Response(200, content=json.dumps({"data": [{"id": "m"}]}).encode(),
                              headers={"content-type": "application/json"})


async def test_concurrent_misses_share_one_upstream_request():
    upstream = SlowUpstream()
    catalog = ModelCatalog(upstream, ttl=10, aliases={})  # type: ignore[arg-type]
    names = await asyncio.gather(*(catalog.resolve("m", {"authorization": "Bearer a"}) for _ in range(50)))
    assert names == ["m"] * 50
    assert upstream.calls == 1
    await catalog.resolve("m", {"authorization": "Bearer b"})  # another key: its own answer
    assert upstream.calls == 2


async def test_an_expired_answer_is_fetched_again():
    upstream = SlowUpstream()
    catalog = ModelCatalog(upstream, ttl=0, aliases={})  # type: ignore[arg-type]
    await catalog.fetch({})
    await catalog.fetch({})
    assert upstream.calls == 2


async def test_a_failure_reaches_every_waiter_and_is_not_kept():
    upstream = SlowUpstream(fail=True)
    catalog = ModelCatalog(upstream, ttl=10, aliases={})  # type: ignore[arg-type]
    results = await asyncio.gather(*(catalog.fetch({}) for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, UpstreamUnavailable) for r in results)
    assert upstream.calls == 1
    with pytest.raises(UpstreamUnavailable):
        await catalog.fetch({})
    assert upstream.calls == 2


async def test_a_waiter_that_goes_away_does_not_cancel_the_others():
    upstream = SlowUpstream()
    catalog = ModelCatalog(upstream, ttl=10, aliases={})  # type: ignore[arg-type]
    first = asyncio.ensure_future(catalog.fetch({}))
    second = asyncio.ensure_future(catalog.fetch({}))
    await asyncio.sleep(0.01)
    first.cancel()
    assert (await second).names == ["m"]
    assert upstream.calls == 1


async def test_a_cached_answer_resolves_without_a_turn_of_the_event_loop():
    # A request waiting a turn waits behind every stream's chunks ready then: a fresh answer is read at once.
    catalog = ModelCatalog(SlowUpstream(), ttl=10, aliases={})  # type: ignore[arg-type]
    await catalog.resolve("m", {"authorization": "Bearer a"})  # fetched: a turn (or many) is fine here
    turned = []
    asyncio.get_running_loop().call_soon(turned.append, True)
    assert await catalog.resolve("m", {"authorization": "Bearer a"}) == "m"
    assert turned == []
    await asyncio.sleep(0)
    assert turned == [True]
