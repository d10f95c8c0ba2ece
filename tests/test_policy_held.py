"""A widening policy edit held until SIGHUP is visible everywhere (DESIGN invariant 13), with no traffic: `/health`
(reason `policy_held`, status degraded, still 200), `allowlist_proxy_policy_held{file}` (0 from start, 1 while
held), the alert webhook, the dashboard's banner in real Chromium (what the edit widens and the command that
applies it), and `allowlist-proxy policy status` (exit 1 while held)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from proxy.http.app import create_app
from proxy.stats.webhook import Webhook
from proxy.testing.server import ServerThread
from tests.conftest import ROOT, STRICT_POLICY, wait_until
from tests.test_alerts import _Receiver
from tests.test_dashboard import DevTools, LiveSettings, browser, screenshot  # noqa: F401 (the fixture)
from tests.test_metrics import scrape, value

TOKEN = "held-token"


@pytest.fixture
def backend() -> str:
    return "sqlite"  # the policy's state lives in the proxy, not the store


def _settled(path: Path, text: str) -> None:
    path.write_text(text)
    old = time.time() - 5  # the reload does not wait for a settled file to hold still
    os.utime(path, (old, old))


def _widened(text: str, *names: str) -> str:
    head, sep, tail = text.partition("\n  scripts:")
    line, newline, rest = tail.partition("\n")
    assert sep and newline
    return head + sep + line + "\n" + "".join(f"    {name}: {{}}\n" for name in names) + rest


def _status(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOWLIST_PROXY_")}
    return subprocess.run([sys.executable, "-m", "proxy", "policy", "status", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=60)


def _held_metric(proxy, file: str) -> float | None:
    samples = scrape(proxy, TOKEN)
    key = ("allowlist_proxy_policy_held", (("file", file),))
    return samples.get(key)


def test_a_held_edit_shows_in_health_metrics_webhook_and_cli(upstream, start_proxy, tmp_path: Path):
    policy = tmp_path / "served.yaml"
    text = STRICT_POLICY.read_text()
    _settled(policy, text)
    proxy = start_proxy(upstream.url, policy=policy, admin_token=TOKEN)
    manager = proxy.services.policies
    file = str(policy)
    # From start, before anything is held and with no traffic: the series exists at 0, /health is ok.
    assert _held_metric(proxy, file) == 0
    with proxy.client() as client:
        assert client.get("/health").json()["status"] == "ok"
    quiet = _status("--url", proxy.url, "--admin-token", TOKEN)
    assert quiet.returncode == 0, quiet.stderr
    assert "nothing held" in quiet.stdout

    _settled(policy, _widened(text, "build", "deploy"))
    assert manager.reload() is False  # what the watcher does on the edit
    with proxy.client() as client:
        health = client.get("/health")
    assert health.status_code == 200  # still serving the policy before the edit: readiness holds
    body = health.json()
    assert body["status"] == "degraded"
    held = body["reasons"]["policy_held"]
    assert file in held and "build" in held and "deploy" in held and f"kill -HUP {os.getpid()}" in held
    assert _held_metric(proxy, file) == 1
    assert value(scrape(proxy, TOKEN), "allowlist_proxy_policy_valid", file=file) == 1  # not refused: held

    out = _status("--url", proxy.url, "--admin-token", TOKEN)
    assert out.returncode == 1, out.stderr
    assert "held" in out.stdout and "added build" in out.stdout and f"kill -HUP {os.getpid()}" in out.stdout
    as_json = _status("--url", proxy.url, "--admin-token", TOKEN, "--json")
    assert as_json.returncode == 1
    entry = json.loads(as_json.stdout)["held"][0]
    assert entry["file"] == file and any("build" in w for w in entry["widens"])
    assert entry["served_hash"] == manager.current().hash and entry["apply"] == f"kill -HUP {os.getpid()}"
    refused = _status("--url", proxy.url)  # no token where the proxy wants one
    assert refused.returncode == 2 and "admin token" in refused.stderr

    manager.apply_held()  # what SIGHUP runs
    assert _held_metric(proxy, file) == 0
    with proxy.client() as client:
        assert client.get("/health").json()["status"] == "ok"
    assert _status("--url", proxy.url, "--admin-token", TOKEN).returncode == 0


async def test_the_webhook_says_what_the_held_edit_widens_and_how_to_apply_it(tmp_path: Path):
    from proxy.policy import PolicyManager

    receiver = _Receiver()
    policy = tmp_path / "served.yaml"
    text = STRICT_POLICY.read_text()
    _settled(policy, text)
    manager = PolicyManager(policy)
    with ServerThread(receiver.app) as server:
        hook = Webhook(server.url + "/hook", interval_seconds=3600, held=manager.held)
        try:
            await hook.check_once()
            assert not [p for p in receiver.posts if p["event"] == "policy_held" and p["subject"] == str(policy)]
            _settled(policy, _widened(text, "build"))
            assert manager.reload() is False
            await hook.check_once()
            await hook.check_once()  # once per interval
        finally:
            await hook.stop()
        manager.apply_held()
    posts = [p for p in receiver.posts if p["event"] == "policy_held" and p["subject"] == str(policy)]
    assert len(posts) == 1
    assert "build" in posts[0]["detail"] and f"kill -HUP {os.getpid()}" in posts[0]["detail"]
    assert posts[0]["text"].startswith("allowlist-proxy: policy_held")


def test_reverting_or_breaking_the_held_file_drops_the_hold(upstream, start_proxy, tmp_path: Path):
    policy = tmp_path / "served.yaml"
    text = STRICT_POLICY.read_text()
    _settled(policy, text)
    proxy = start_proxy(upstream.url, policy=policy, admin_token=TOKEN)
    manager, file = proxy.services.policies, str(policy)
    _settled(policy, _widened(text, "build"))
    manager.reload()
    assert manager.held() and _held_metric(proxy, file) == 1
    _settled(policy, text)  # reverted: what is on disk serves again
    assert manager.reload() is True
    assert manager.held() == [] and _held_metric(proxy, file) == 0
    _settled(policy, _widened(text, "build"))
    manager.reload()
    _settled(policy, text.replace("retry_budget: 3", "retry_budget: many"))  # then broken: refused, not held
    manager.reload()
    assert manager.held() == [] and _held_metric(proxy, file) == 0
    with proxy.client() as client:
        reasons = client.get("/health").json()["reasons"]
    assert "policy" in reasons and "policy_held" not in reasons


def test_a_held_sibling_policy_counts_as_held_too(upstream, start_proxy, tmp_path: Path):
    policy = tmp_path / "served.yaml"
    sibling = tmp_path / "team.yaml"
    text = STRICT_POLICY.read_text()
    _settled(policy, text)
    _settled(sibling, text.replace("name: strict-uv-scripts", "name: team-policy"))
    proxy = start_proxy(upstream.url, policy=policy, admin_token=TOKEN)
    assert _held_metric(proxy, str(sibling)) == 0
    _settled(sibling, _widened(text.replace("name: strict-uv-scripts", "name: team-policy"), "build"))
    proxy.services.policies.reload()
    assert _held_metric(proxy, str(sibling)) == 1 and _held_metric(proxy, str(policy)) == 0
    with proxy.client() as client:
        assert str(sibling) in client.get("/health").json()["reasons"]["policy_held"]
    sibling.unlink()  # gone: nothing held any more
    proxy.services.policies.reload()
    assert _held_metric(proxy, str(sibling)) == 0


def test_the_dashboard_shows_the_held_edit_and_the_command(tmp_path: Path, db_url: str, browser: DevTools):  # noqa: F811
    policy = tmp_path / "strict.yaml"
    text = STRICT_POLICY.read_text()
    _settled(policy, text)
    settings = LiveSettings(upstream="http://127.0.0.1:9/v1", db=db_url, policy=policy, log_level="warning")
    app = create_app(settings)
    with ServerThread(app) as server:
        _settled(policy, _widened(text, "build"))
        assert wait_until(lambda: app.state.proxy.policies.held(), timeout=15)  # the watcher saw the edit
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": 390, "height": 1200, "deviceScaleFactor": 1, "mobile": True})
        browser.call("Page.navigate", {"url": f"{server.url}/dashboard?refresh=1"})
        browser.wait_for("!!document.querySelector('#banners .banner[data-kind=\"policy_held\"]')")
        banner = browser.evaluate("""(() => {
            const b = document.querySelector('#banners .banner[data-kind="policy_held"]');
            return {text: b.textContent, file: b.dataset.file, apply: b.querySelector("code.apply").textContent,
                    widens: [...b.querySelectorAll("ul.widens li")].map((li) => li.textContent)};
        })()""")
        assert banner["file"] == str(policy) and str(policy) in banner["text"]
        assert banner["apply"] == f"kill -HUP {os.getpid()}"
        assert any("build" in item for item in banner["widens"]), banner
        assert browser.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        screenshot(browser, "dashboard-policy-held.png")
        with httpx.Client(base_url=server.url) as client:
            health = client.get("/health").json()
        assert "policy_held" in health["reasons"]  # the banner and /health say the same
        app.state.proxy.policies.apply_held()
        browser.wait_for("!document.querySelector('#banners .banner[data-kind=\"policy_held\"]')")
