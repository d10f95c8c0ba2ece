"""GET /dashboard/sessions/{id} in real headless Chromium: a session's requests and attempts in order, every
call with its verdict, reasons, the feedback the model got and the repaired form, the client profile and
the project root (or a clear place for it), reached from the dashboard's loops, model table and error-rate
chart; readable at a phone's width. Screenshots: tests/artifacts/session-390.png, session-1280.png."""

from __future__ import annotations

import time

from proxy.testing.scripted_upstream import ScriptedUpstream
from tests import test_dashboard
from tests.conftest import MODEL, RunningProxy, wait_until
from tests.test_dashboard import LOOP_COMMANDS, SEARCH, TOKEN, DevTools, _api, _ask, _bash, screenshot

# The dashboard test's fixtures: its headless Chromium, its proxy (admin token, 1 s windows), SQLite only.
backend = test_dashboard.backend
browser = test_dashboard.browser
dashboard_proxy = test_dashboard.dashboard_proxy


def _seed(upstream: ScriptedUpstream, proxy: RunningProxy) -> None:
    upstream.script(*map(_bash, LOOP_COMMANDS[:3]), _bash(SEARCH), model=MODEL)  # a loop of 3, then allowed
    with proxy.client() as client:
        _ask(client, MODEL, "ses_view")

    def recorded() -> bool:
        with proxy.client(headers={"authorization": f"Bearer {TOKEN}"}) as client:
            answer = client.get("/stats/sessions/ses_view")
        return answer.status_code == 200 and len(answer.json()["request_list"]) == 1

    assert wait_until(recorded)


def test_the_session_api_has_requests_feedback_and_a_place_for_the_project_root(
    upstream: ScriptedUpstream, dashboard_proxy: RunningProxy
):
    _seed(upstream, dashboard_proxy)
    detail = _api(dashboard_proxy, "/stats/sessions/ses_view")
    assert [(r["attempts"], r["outcome"]) for r in detail["request_list"]] == [(4, "ok")]
    assert "project_root" in detail and detail["profiles"]
    rejected = [c for c in detail["calls"] if c["decision"] == "reject"]
    assert len(rejected) == 3 and all(c["feedback"] and "pipe" in c["feedback"] for c in rejected)
    assert all(c["feedback"] is None for c in detail["calls"] if c["decision"] == "allow")
    with dashboard_proxy.client() as client:  # the data is admin-guarded; the page holds none
        assert client.get("/stats/sessions/ses_view").status_code == 401
        page = client.get("/dashboard/sessions/ses_view")
        assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]


def test_the_session_page_shows_each_attempt_and_is_reached_from_the_dashboard(
    upstream: ScriptedUpstream, dashboard_proxy: RunningProxy, browser: DevTools
):
    proxy = dashboard_proxy
    _seed(upstream, proxy)
    browser.call("Page.navigate", {"url": f"{proxy.url}/dashboard?token={TOKEN}&refresh=60"})
    browser.wait_for("window.dashboard && window.dashboard.refreshes >= 1")
    # Linked from the loops, the model table (the model's name) and the error-rate chart (a click on a bar).
    links = browser.evaluate("""[...document.querySelectorAll('#loop-groups a, #table-models a')]
                                .map((a) => a.getAttribute('href'))""")
    assert links == ["dashboard/sessions/ses_view"] * 2, links
    browser.evaluate("document.getElementById('chart-error-rate').scrollIntoView()")
    bar = browser.evaluate("""(() => { const c = Chart.getChart(document.getElementById('chart-error-rate'));
        const p = c.getDatasetMeta(0).data[0].getCenterPoint();
        const r = c.canvas.getBoundingClientRect(); return [r.left + p.x / 2, r.top + p.y]; })()""")
    for kind in ("mousePressed", "mouseReleased"):
        browser.call("Input.dispatchMouseEvent", {"type": kind, "x": bar[0], "y": bar[1], "button": "left",
                                                  "clickCount": 1})
    browser.wait_for("location.pathname.endsWith('/dashboard/sessions/ses_view')")
    browser.wait_for("document.querySelectorAll('.call').length === 4")
    verdicts = browser.evaluate("[...document.querySelectorAll('.verdict')].map((v) => v.textContent)")
    assert verdicts == ["reject"] * 3 + ["allow"]
    assert browser.evaluate("document.querySelectorAll('.attempt h4').length") == 4
    assert browser.evaluate("document.querySelectorAll('.call details pre').length") == 3  # the feedback
    assert "| head -5" in browser.evaluate("document.querySelector('.call pre').textContent")
    facts = browser.evaluate("document.getElementById('facts').textContent")
    assert "Project root" in facts and "Client profiles" in facts and "opencode" in facts
    for width in (360, 390, 1280):
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": width, "height": 1400, "deviceScaleFactor": 1, "mobile": width < 768})
        browser.wait_for(f"window.innerWidth === {width}")
        browser.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
        time.sleep(0.1)
        overflow = browser.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert overflow[0] <= overflow[1], (width, overflow)
        if width in (390, 1280):
            screenshot(browser, f"session-{width}.png")
    problems = [e["params"] for e in browser.events
                if e.get("method") == "Runtime.exceptionThrown"
                or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
    assert problems == []


