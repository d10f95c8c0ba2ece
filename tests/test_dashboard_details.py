"""Dashboard details in real headless Chromium: eight models get eight colours no eye confuses, no empty 0-1
throughput charts when nothing streamed usage, every column of the model table (Recovery too) visible at
1280 px, and upstream failures counted (a card figure, /stats/overview, the metric). The default range's
switch to the last hour for new traffic is checked by tests/test_dashboard.py.
Screenshot: tests/artifacts/dashboard-details-1280.png."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator

import pytest

from proxy.config import Settings
from proxy.http.app import create_app
from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from proxy.testing.server import ServerThread
from tests import test_dashboard
from tests.conftest import STRICT_POLICY, RunningProxy, wait_until
from tests.test_dashboard import SEARCH, TOKEN, DevTools, _api, _ask, _bash, screenshot

backend = test_dashboard.backend
browser = test_dashboard.browser
MODELS = [f"model-{letter}" for letter in "abcdefgh"]


def _lab(rgb: tuple[float, float, float]) -> tuple[float, float, float]:
    def linear(c: float) -> float:
        c /= 255
        return ((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92

    r, g, b = map(linear, rgb)
    x = (r * 0.4124 + g * 0.3576 + b * 0.1805) / 0.95047
    y = r * 0.2126 + g * 0.7152 + b * 0.0722
    z = (r * 0.0193 + g * 0.1192 + b * 0.9505) / 1.08883

    def f(v: float) -> float:
        return v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


@pytest.fixture
def many_models(db_url: str) -> Iterator[tuple[ScriptedUpstream, RunningProxy]]:
    upstream = ScriptedUpstream(models=MODELS)
    with ServerThread(upstream.app) as up:
        upstream.url = up.url + "/v1"
        settings = Settings(upstream=upstream.url, db=db_url, policy=STRICT_POLICY, log_level="warning",
                            admin_token=TOKEN)
        app = create_app(settings)
        server = ServerThread(app).start()
        yield upstream, RunningProxy(server, app, db_url)
        server.stop()


def test_eight_models_whole_answers_and_an_upstream_failure(many_models, browser: DevTools):
    upstream, proxy = many_models
    for model in MODELS:
        upstream.script(_bash(SEARCH), model=model)
    upstream.script(Reply(status=500, error_message="CUDA out of memory"), model=MODELS[-1])
    with proxy.client() as client:
        for model in MODELS:
            _ask(client, model, f"ses_{model}")
        failed = client.post("/v1/chat/completions", json={"model": MODELS[-1], "messages": [
            {"role": "user", "content": "go"}]}, headers={"x-session-id": "ses_fail"})
        assert failed.status_code >= 500
        metrics = client.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"}).text
    assert f'allowlist_proxy_upstream_errors_total{{model_name="{MODELS[-1]}"' in metrics

    assert wait_until(lambda: _api(proxy, "/stats/overview").get("upstream_errors") == {MODELS[-1]: 1})
    browser.call("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 1600, "deviceScaleFactor": 1,
                                                       "mobile": False})
    browser.call("Page.navigate", {"url": f"{proxy.url}/dashboard?token={TOKEN}&refresh=60"})
    browser.wait_for("window.dashboard && window.dashboard.refreshes >= 1")
    browser.wait_for("window.innerWidth === 1280")
    time.sleep(0.3)  # the charts resize on the next frame

    colours = json.loads(browser.evaluate("""JSON.stringify([...document.querySelectorAll('#cards .card')].map(
        (card) => getComputedStyle(card).borderTopColor.match(/[0-9.]+/g).slice(0, 3).map(Number)))"""))
    assert len(colours) == len(MODELS)
    closest = min(sum((p - q) ** 2 for p, q in zip(_lab(a), _lab(b), strict=True)) ** 0.5
                  for a, b in itertools.combinations(colours, 2))
    assert closest > 20, closest  # CIE76: about 2 is "just noticeable"; the old palette had a pair at 2.7

    upstream_figures = browser.evaluate("""Object.fromEntries([...document.querySelectorAll('#cards .card')].map(
        (card) => [card.dataset.model, card.querySelector('[data-field=upstream_errors]').firstChild.textContent]))""")
    assert upstream_figures[MODELS[-1]] == "1" and upstream_figures[MODELS[0]] == "0"

    # Nothing streamed usage: no throughput chart is drawn as an empty 0-1 frame.
    assert browser.evaluate("""[...document.querySelectorAll('#throughput figure')].every(
        (f) => f.hidden && f.offsetHeight === 0)""")
    assert not browser.evaluate("document.getElementById('throughput-empty').hidden")
    assert browser.evaluate("document.getElementById('chart-reasons').offsetHeight") == 0  # no reason yet

    # Every column of the model table fits at 1280 px: Recovery is not cut off.
    scroll = browser.evaluate("""(() => { const box = document.querySelector('#table-models').parentElement;
        return [box.scrollWidth, box.clientWidth]; })()""")
    assert scroll[0] <= scroll[1], scroll
    headers = browser.evaluate("[...document.querySelectorAll('#table-models th')].map((th) => th.textContent)")
    assert any("Recovery" in h for h in headers), headers
    screenshot(browser, "dashboard-details-1280.png")
