"""GET /dashboard in real headless Chromium: the headline per model equals /stats/models, the charts show the
numbers the traffic made and refresh live, the layout never scrolls sideways from 360 px to desktop, troubles
show as banners, and the page asks nothing of any host but the proxy.

Chromium is driven over the DevTools protocol with the `websockets` client; the test is skipped when no
Chromium is installed (Debian: `apt-get install chromium`; `.ci/run` installs it). Screenshots are left in
tests/artifacts/ (dashboard-390.png, dashboard-1400.png, dashboard-troubles.png).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.config import Settings
from proxy.http.app import create_app
from proxy.testing.characters import OPENCODE_TOOLS
from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from proxy.testing.server import ServerThread
from proxy.throughput.live import live_throughput
from tests.conftest import MODEL, ROOT, STRICT_POLICY, RunningProxy, wait_until

OTHER = "qwen3.6-35b-a3b"
TOKEN = "dash-token"
ARTIFACTS = ROOT / "tests" / "artifacts"
SEARCH = 'uv run scripts/search.py "rust async"'
LOOP_COMMANDS = [f"{SEARCH} | head -5", f"{SEARCH} | head -10", f"{SEARCH} | tail -3", f"{SEARCH} | head -1"]
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
    # Belt and braces: no name resolves but the proxy's, so nothing could leave even if the page asked.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--remote-debugging-port=0", "--window-size=1400,1800",
]


def chromium_path() -> str | None:
    given = os.environ.get("ALLOWLIST_PROXY_TEST_CHROMIUM")
    if given:
        return given
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def LiveSettings(**flat: object) -> Settings:
    # 1 s throughput windows keep this test short.
    return Settings.of(throughput_window_seconds=1.0, **flat)


@pytest.fixture
def backend() -> str:
    return "sqlite"  # the page reads the stats API; the stats' own tests cover Postgres


# --- the DevTools protocol, just enough of it --------------------------------------------------------------


class DevTools:
    """One browser connection; commands go to the page's session (flat mode), events are kept in order."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None
        self._id = 0

    def call(self, method: str, params: dict[str, Any] | None = None, *, browser: bool = False,
             timeout: float = 15.0) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if self.session and not browser:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            answer = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]
            self.events.append(answer)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 15.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError as exc:  # the page navigated while asked (a click that leaves it): ask again
                if "navigated or closed" not in str(exc) and "context was destroyed" not in str(exc):
                    raise
                value = None
            if value:
                return value
            time.sleep(0.1)
        status = self.evaluate("document.getElementById('status').textContent")
        raise AssertionError(f"timed out waiting for {expression}; page status: {status}")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    path = chromium_path()
    if path is None:
        pytest.skip("Chromium not installed: apt-get install chromium (or set ALLOWLIST_PROXY_TEST_CHROMIUM)")
    from websockets.sync.client import connect
    profile = tmp_path / "chromium-profile"
    process = subprocess.Popen([path, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Chromium writes the port it picked, and the browser's websocket path, into the profile.
        port_file = profile / "DevToolsActivePort"
        assert wait_until(lambda: port_file.is_file() and len(port_file.read_text().split()) == 2, timeout=30), \
            "Chromium did not open its DevTools port"
        port, ws_path = port_file.read_text().split()
        with connect(f"ws://127.0.0.1:{port}{ws_path}", max_size=None, open_timeout=10) as ws:
            tools = DevTools(ws)
            target = tools.call("Target.createTarget", {"url": "about:blank"}, browser=True)["targetId"]
            tools.session = tools.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                       browser=True)["sessionId"]
            for domain in ("Network", "Page", "Runtime", "Log"):
                tools.call(f"{domain}.enable")
            tools.call("Emulation.setDeviceMetricsOverride",
                       {"width": 1400, "height": 1800, "deviceScaleFactor": 1, "mobile": False})
            yield tools
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


# --- the proxy, its stats routes and known traffic ----------------------------------------------------------


@pytest.fixture
def dashboard_proxy(upstream: ScriptedUpstream, db_url: str) -> Iterator[RunningProxy]:
    settings = LiveSettings(upstream=upstream.url, db=db_url, policy=STRICT_POLICY, log_level="warning",
                            admin_token=TOKEN)
    app = create_app(settings)
    server = ServerThread(app).start()
    yield RunningProxy(server, app, db_url)
    server.stop()


def _bash(command: str) -> Reply:
    return Reply(tool_calls=[("bash", {"command": command})])


def _ask(client: httpx.Client, model: str, session: str, *, stream: bool = False, tools: bool = True) -> None:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "go"}], "stream": stream}
    if tools:
        body["tools"] = OPENCODE_TOOLS
    response = client.post("/v1/chat/completions", json=body, headers={"x-session-id": session})
    assert response.status_code == 200, response.text


def _seed(upstream: ScriptedUpstream, proxy: RunningProxy) -> None:
    upstream.script(*map(_bash, LOOP_COMMANDS), _bash(SEARCH), model=MODEL)  # a loop of 4, then an allowed call
    upstream.script(_bash("cd scripts && uv run search.py"), _bash(SEARCH), model=OTHER)
    with proxy.client() as client:
        _ask(client, MODEL, "ses_loop")
        _ask(client, MODEL, "ses_ok")
        _ask(client, OTHER, "ses_other")
        # A code agent's acting turn: a Python program the proxy cannot judge, counted as ungoverned.
        upstream.script(Reply(content="Thought: go\n<code>\nimport os\n</code>"), model=OTHER)
        response = client.post("/v1/chat/completions", headers={"x-session-id": "ses_other"}, json={
            "model": OTHER, "messages": [{"role": "system", "content": "Use final_answer(...). End code with </code>."},
                                         {"role": "user", "content": "go"}]})
        assert response.status_code == 200, response.text
    # Two streams side by side for 1.6 s: windows with 2 and then fewer requests running.
    upstream.script(Reply(content="a" * 120, chunk_delay=0.05, completion_tokens=240, prompt_tokens=800),
                    Reply(content="b" * 120, chunk_delay=0.05, completion_tokens=120, prompt_tokens=400), model=MODEL)
    with proxy.client() as a, proxy.client() as b, ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(_ask, c, MODEL, s, stream=True, tools=False) for c, s in ((a, "s1"), (b, "s2"))]:
            future.result(20)


def _api(proxy: RunningProxy, path: str) -> Any:
    with proxy.client(headers={"authorization": f"Bearer {TOKEN}"}) as client:
        response = client.get(path)
    assert response.status_code == 200, response.text
    return response.json()


CHARTS_JS = """JSON.stringify(Object.fromEntries([...document.querySelectorAll("canvas")].map((canvas) => {
  const chart = Chart.getChart(canvas);
  const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  for (let i = 3; i < pixels.length; i += 4) if (pixels[i]) painted++;
  return [canvas.id, {labels: chart.data.labels, painted,
                      datasets: chart.data.datasets.map((d) => ({label: d.label, data: d.data}))}];
})))"""


def _rows(tools: DevTools, table: str) -> list[list[str]]:
    return tools.evaluate(f"""[...document.querySelectorAll("#{table} tbody tr")]
        .map((tr) => [...tr.cells].map((td) => td.textContent))""")


def test_dashboard_draws_the_stats_live_and_stays_on_host(
    upstream: ScriptedUpstream, dashboard_proxy: RunningProxy, browser: DevTools
):
    proxy = dashboard_proxy
    _seed(upstream, proxy)

    def live_windows() -> bool:
        future = asyncio.run_coroutine_threadsafe(live_throughput(proxy.services.engine), proxy.app.state.loop)
        return bool(future.result(10).get(MODEL, {}).get("concurrency"))

    assert wait_until(live_windows, timeout=5), "no throughput window was written"
    time.sleep(math.floor(time.time()) + 1.5 - time.time())  # the window the streams ended in is written too
    stats = {m["model"]: m for m in _api(proxy, "/stats/models")["models"]}
    assert (stats[MODEL]["tool_calls"], stats[MODEL]["errors"]) == (5, 4)
    assert (stats[OTHER]["tool_calls"], stats[OTHER]["errors"]) == (2, 1)
    assert (stats[MODEL]["ungoverned_text_actions"], stats[OTHER]["ungoverned_text_actions"]) == (0, 1)

    browser.call("Page.navigate", {"url": f"{proxy.url}/dashboard?token={TOKEN}&refresh=1"})
    browser.wait_for("window.dashboard && window.dashboard.refreshes >= 1")
    assert browser.evaluate("window.dashboard.errors") == 0
    assert "token" not in browser.evaluate("location.href")  # taken out of the address bar
    charts = json.loads(browser.evaluate(CHARTS_JS))

    # Error rate per model: 4 of 5 and 1 of 2 calls.
    error_rate = charts["chart-error-rate"]
    assert error_rate["labels"] == [MODEL, OTHER]
    assert error_rate["datasets"][0]["data"] == [80, 50]
    assert [r[:6] for r in _rows(browser, "table-models")] == [
        [MODEL, "4", "4", "5", "4", "80.0%"], [OTHER, "1", "2", "2", "1", "50.0%"]]
    headers = browser.evaluate("[...document.querySelectorAll('#table-models th')].map((th) => th.textContent)")
    ungoverned = [next(h for h in headers if h.startswith("Ungoverned"))]
    assert [r[headers.index(ungoverned[0])] for r in _rows(browser, "table-models")] == ["0", "1"]

    # Reasons: every code the API counts, per model.
    reasons = charts["chart-reasons"]
    assert reasons["labels"][0] == "pipe"
    for dataset in reasons["datasets"]:
        api_reasons = stats[dataset["label"]]["reasons"]
        assert dict(zip(reasons["labels"], dataset["data"], strict=True)) == {
            code: api_reasons.get(code, 0) for code in reasons["labels"]}
    assert set(reasons["labels"]) == set(stats[MODEL]["reasons"]) | set(stats[OTHER]["reasons"])

    # Headline first: per model the API's own numbers, blocked turns as the store counts them.
    blocked = {r["model"]: r["n"] for r in proxy.rows(
        "SELECT model, COUNT(*) AS n FROM requests WHERE budget_exhausted GROUP BY model")}
    assert blocked.get(MODEL) == 1  # the loop of four spent the budget of three retries
    headline = browser.evaluate("window.dashboard.headline")
    assert headline == [{"model": m, "tool_calls": stats[m]["tool_calls"], "error_rate": stats[m]["error_rate"],
                         "blocked": blocked.get(m, 0), "loops": stats[m]["loops"]["count"],
                         "recovery_rate": stats[m]["recovery_rate"], "upstream_errors": 0,
                         "ungoverned": stats[m]["ungoverned_text_actions"]} for m in (MODEL, OTHER)]
    cards = browser.evaluate("""[...document.querySelectorAll("#cards .card")].map((card) => [card.dataset.model,
        ...[...card.querySelectorAll("dd")].map((dd) => dd.firstChild.textContent)])""")
    assert cards == [[MODEL, "5", "80.0%", "1", "1", cards[0][5], "0", "0"],
                     [OTHER, "2", "50.0%", "0", "0", cards[1][5], "0", "1"]]
    # The ungoverned count is visible on its card, not only in the page's data.
    assert browser.evaluate("""(() => { const dd = document.querySelector(
        '#cards .card:nth-child(2) [data-field=ungoverned]'); const box = dd.getBoundingClientRect();
        return box.width > 0 && box.height > 0 && getComputedStyle(dd).visibility === 'visible'; })()""")
    first = browser.evaluate("document.querySelector('main > section').id")
    assert first == "headline"

    # Error rate over time: all traffic is minutes old, so the default range is the last hour (24 h would show
    # it as dots at the right edge); the picker still gives 24 h.
    timeline = charts["chart-timeline"]
    assert sorted(d["label"] for d in timeline["datasets"]) == sorted([MODEL, OTHER])
    assert 80 in timeline["datasets"][[d["label"] for d in timeline["datasets"]].index(MODEL)]["data"]
    assert "the last hour" in browser.evaluate("document.getElementById('timeline-window').textContent")
    assert browser.evaluate("document.querySelector('.picker [aria-pressed=\"true\"]').dataset.range") == "1h"
    browser.evaluate("document.querySelector('.picker button[data-range=\"24h\"]').click()")
    browser.wait_for("document.getElementById('timeline-window').textContent.includes('the last 24 hours')")
    browser.evaluate("document.querySelector('.picker button[data-range=\"1h\"]').click()")
    browser.wait_for("document.getElementById('timeline-window').textContent.includes('the last hour')")

    # Loops: one group (model x shape) with its count and lengths; its sessions only when opened, as links.
    groups = browser.evaluate("""[...document.querySelectorAll("#loop-groups details")].map((d) =>
        [d.dataset.model, d.dataset.shape, d.querySelector(".count").textContent, d.open])""")
    assert groups == [[MODEL, "pipe", "1 loop", False]]
    browser.evaluate("document.querySelector('#loop-groups summary').click()")
    links = browser.evaluate("""[...document.querySelectorAll("#loop-groups details[open] a")]
        .map((a) => a.getAttribute("href"))""")
    assert links == ["dashboard/sessions/ses_loop"]  # the session view
    assert browser.evaluate("document.querySelectorAll('#loops code').length") == 1  # the shape, no command wall

    # Throughput by concurrency: the charts carry the API's live cells. The page refreshes every second and
    # a window may close between two reads, so the charts, the table and the figures the page drew them from
    # are read in one evaluation (one refresh draws them all at once).
    drawn_charts, drawn_stats, drawn_rows = browser.evaluate(f"""[{CHARTS_JS},
        JSON.stringify(window.dashboard.stats),
        [...document.querySelectorAll("#table-throughput tbody tr")].map((tr) =>
            [...tr.cells].map((td) => td.textContent))]""")
    drawn = {m["model"]: m for m in json.loads(drawn_stats)["models"]}
    every_cell = {m: (drawn[m].get("throughput") or {}).get("concurrency") or {} for m in drawn}
    cells = every_cell[MODEL]
    assert "2" in cells
    # One axis for every model's levels (the other model's single stream may have closed a window of its own).
    levels = sorted({c for model_cells in every_cell.values() for c in model_cells}, key=int)
    for chart_id, field in (("chart-generation", "generation_tps"), ("chart-prefill", "prompt_tps"),
                            ("chart-requests", "requests_per_minute")):
        chart = json.loads(drawn_charts)[chart_id]
        assert chart["labels"] == levels
        series = {d["label"]: dict(zip(chart["labels"], d["data"], strict=True)) for d in chart["datasets"]}
        for model, model_cells in every_cell.items():
            if model_cells:
                assert {c: series[model][c] for c in model_cells} == {
                    c: model_cells[c][field] for c in model_cells}, (chart_id, model)
    assert cells["2"]["generation_tps"] > 0
    throughput_rows = {(r[0], r[1]): r for r in drawn_rows}
    assert throughput_rows[MODEL, "2"][2] == f"{cells['2']['generation_tps']:.1f} ({cells['2']['n']})"

    # Every chart is drawn, not only fed.
    assert all(chart["painted"] > 500 for chart in charts.values()), {k: v["painted"] for k, v in charts.items()}

    # Live: new traffic shows up without a reload. The other model's third call is rejected: 2 of 3.
    upstream.script(_bash("cd scripts && uv run search.py"), Reply(content="I will stop here."), model=OTHER)
    with proxy.client() as client:
        _ask(client, OTHER, "ses_other2")
    browser.wait_for("""Chart.getChart(document.getElementById("chart-error-rate")).data.datasets[0].data[1]
                        === 66.7""", timeout=10)

    # No sideways scrolling from a small phone to a desktop; a screenshot at a phone's width and a desktop's.
    for width in (360, 390, 768, 1400):
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": width, "height": 1800, "deviceScaleFactor": 1, "mobile": width < 768})
        browser.wait_for(f"window.innerWidth === {width}")
        time.sleep(0.3)  # the charts resize on the next frame
        overflow = browser.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert overflow[0] <= overflow[1], (width, overflow)
        if width in (390, 1400):
            screenshot(browser, f"dashboard-{width}.png")

    # Nothing but the proxy was asked, the data requests carried the token, and nothing went wrong on the page.
    sent = [e["params"]["request"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    assert sent and all(r["url"].startswith(proxy.url + "/") for r in sent), {r["url"] for r in sent}
    stats_requests = [r for r in sent if "/stats/" in r["url"]]
    assert stats_requests and all(r["headers"].get("Authorization") == f"Bearer {TOKEN}" for r in stats_requests)
    problems = [e["params"] for e in browser.events
                if e.get("method") == "Runtime.exceptionThrown"
                or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
    assert problems == []


def screenshot(browser: DevTools, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = browser.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
    (ARTIFACTS / name).write_bytes(base64.b64decode(shot["data"]))


def test_dashboard_says_what_is_wrong_and_what_to_do(tmp_path: Path, db_url: str, browser: DevTools):
    policy = tmp_path / "strict.yaml"
    shutil.copy(STRICT_POLICY, policy)
    settings = LiveSettings(upstream="http://127.0.0.1:9/v1", db=db_url, policy=policy, log_level="warning")
    app = create_app(settings)
    with ServerThread(app) as server:
        time.sleep(0.3)  # a new modification time for the watcher
        policy.write_text(policy.read_text().replace("retry_budget: 3", "retry_budget: many"))
        assert wait_until(lambda: app.state.proxy.policies.status()["errors"], timeout=10)
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": 390, "height": 1200, "deviceScaleFactor": 1, "mobile": True})
        browser.call("Page.navigate", {"url": f"{server.url}/dashboard?refresh=1"})
        browser.wait_for("window.dashboard && window.dashboard.refreshes >= 1")
        banners = browser.evaluate("""[...document.querySelectorAll("#banners .banner")]
            .map((b) => [b.dataset.kind, b.textContent])""")
        assert [kind for kind, _ in banners] == ["upstream", "policy"], banners
        assert "http://127.0.0.1:9/v1" in banners[0][1] and "retry_budget" in banners[1][1]
        hint = browser.evaluate("[document.getElementById('headline-empty').hidden, "
                                "document.getElementById('headline-empty').textContent]")
        assert hint[0] is False and f"{server.url}/v1" in hint[1], hint
        assert browser.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        screenshot(browser, "dashboard-troubles.png")


def test_dashboard_files_are_served_with_a_strict_policy(start_proxy: Callable[..., RunningProxy], upstream):
    proxy = start_proxy(upstream.url, admin_token=TOKEN)
    with proxy.client() as client:
        page = client.get("/dashboard")  # no token: the page holds no data
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert "connect-src 'self'" in page.headers["content-security-policy"]
        script = client.get("/dashboard/static/chart.umd.min.js")
        assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
        assert script.content.startswith(b"/*!\n * Chart.js v4")
        missing = client.get("/dashboard/static/nothing.js")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        assert client.get("/dashboard/static/..%2F..%2Fpyproject.toml").status_code == 404
