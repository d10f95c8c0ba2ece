"""Each upstream probed, true at rest (DESIGN invariant 13): `/health` names every upstream that is down and only
those; `allowlist_proxy_upstream_up` exists from start for every configured upstream, a fixed `models:` list
included, and follows the background probe, not the traffic; the dashboard's banner data agrees with /health."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxy.testing.scripted_upstream import ScriptedUpstream
from proxy.testing.server import ServerThread, free_port
from tests.conftest import MODEL, wait_until
from tests.test_metrics import scrape, value

DENSE, MOE = MODEL, "qwen3.6-35b-a3b"


@pytest.fixture
def backend() -> str:
    return "sqlite"  # the probe does not depend on the database


class _Restartable:
    """A scripted upstream on a fixed port that can stop and come back there."""

    def __init__(self, models: list[str]) -> None:
        self.scripted = ScriptedUpstream(models=models)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.server: ServerThread | None = None

    def start(self) -> None:
        self.server = ServerThread(self.scripted.app, port=self.port).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


@pytest.fixture
def pair() -> Iterator[tuple[_Restartable, _Restartable]]:
    dense, moe = _Restartable([DENSE]), _Restartable([MOE])
    dense.start()
    moe.start()
    try:
        yield dense, moe
    finally:
        dense.stop()
        moe.stop()


def _health(proxy) -> dict:
    with proxy.client() as client:
        return client.get("/health").json()


def _banner_upstreams(proxy) -> dict[str, bool]:
    with proxy.client() as client:
        status = client.get("/stats/overview").json()["status"]
    return {u["url"]: u["reachable"] for u in status["upstreams"]}


@pytest.mark.parametrize("listed", [False, True], ids=["auto", "listed"])
def test_health_names_the_upstream_that_is_down_and_only_it(pair, start_proxy, listed):
    dense, moe = pair
    upstreams = [{"url": dense.url, "models": [DENSE] if listed else "auto"},
                 {"url": moe.url, "models": [MOE] if listed else "auto"}]
    proxy = start_proxy("http://127.0.0.1:9/v1", upstreams=upstreams, upstream_probe_seconds=30)
    assert _health(proxy)["status"] == "ok"

    moe.stop()  # the second one: /health used to name the first
    health = _health(proxy)
    assert health["status"] == "degraded"
    assert moe.url in health["reasons"]["upstream"] and dense.url not in health["reasons"]["upstream"]
    assert {u["url"]: u["reachable"] for u in health["upstreams"]} == {dense.url: True, moe.url: False}
    assert health["upstream_reachable"] is False
    assert _banner_upstreams(proxy) == {dense.url: True, moe.url: False}  # the dashboard agrees

    dense.stop()
    health = _health(proxy)
    assert dense.url in health["reasons"]["upstream"] and moe.url in health["reasons"]["upstream"]
    moe.start()
    health = _health(proxy)
    assert moe.url not in health["reasons"]["upstream"] and dense.url in health["reasons"]["upstream"]
    assert _banner_upstreams(proxy) == {dense.url: False, moe.url: True}


def test_the_up_gauge_exists_from_start_and_follows_the_probe_at_rest(pair, start_proxy):
    dense, moe = pair
    dead = f"http://127.0.0.1:{free_port()}/v1"
    upstreams = [{"url": dense.url, "models": [DENSE]}, {"url": moe.url, "models": [MOE]},
                 {"url": dead, "models": ["nobody"]}]
    proxy = start_proxy("http://127.0.0.1:9/v1", upstreams=upstreams, upstream_probe_seconds=0.2)
    # No request has been made: every configured upstream has its series already, fixed model lists included.
    first = scrape(proxy)
    for url in (dense.url, moe.url, dead):
        assert ("allowlist_proxy_upstream_up", (("upstream", url),)) in first, (url, proxy.services.probe.last)
    assert value(first, "allowlist_proxy_upstream_up", upstream=dead) == 0

    def up(url: str) -> float:
        return value(scrape(proxy), "allowlist_proxy_upstream_up", upstream=url)

    # Up as the probe found them: the first check's answer, or (on a machine so loaded that a probe of a live
    # upstream timed out) the next one's, a probe interval later.
    assert wait_until(lambda: up(dense.url) == 1 and up(moe.url) == 1, timeout=10), proxy.services.probe.last

    moe.stop()
    assert wait_until(lambda: up(moe.url) == 0, timeout=10)
    assert up(dense.url) == 1
    moe.start()  # back, and still no traffic: the gauge follows within the probe interval
    assert wait_until(lambda: up(moe.url) == 1, timeout=10)
    assert dense.scripted.requests == [] and moe.scripted.requests == []  # no chat request was needed


def test_the_probe_runs_on_its_own_setting(pair, start_proxy):
    dense, _moe = pair
    proxy = start_proxy(dense.url, upstream_probe_seconds=0.1)
    probe = proxy.services.probe
    seen: set[float] = set()

    def checked_three_times() -> bool:
        if probe.last is not None:
            seen.add(probe.last[0].at)
        return len(seen) >= 3

    assert wait_until(checked_three_times, timeout=10)
    assert probe.last is not None and probe.last[0].up


def test_an_upstream_keeps_its_own_series_however_many_a_process_has_seen():
    """Label values from clients are bounded (a new one past the bound reads "other"); an upstream's come from the
    operator's configuration, and a long-lived process (a test worker, a proxy reloaded for months) that has seen
    hundreds still reports each under its own URL."""
    from proxy.stats.prometheus import OTHER_LABEL, bound_label

    urls = [f"http://10.0.{i // 250}.{i % 250}:8000/v1" for i in range(400)]
    assert [bound_label("upstream", url) for url in urls] == urls
    other = f"client_label_{id(urls)}"  # a label of no metric: the bound is per label, and process-wide
    assert OTHER_LABEL in {bound_label(other, f"value-{i}") for i in range(400)}  # a client's value stays bounded
