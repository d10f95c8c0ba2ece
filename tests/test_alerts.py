"""The Prometheus alerting rules beside the Grafana dashboard: valid, firing on the events they name
(promtool's unit tests in docker/prometheus/alerts.test.yaml), and written over metrics the proxy exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.stats.prometheus import BLOCKED_TURNS, LOOPS, POLICY_VALID, REGISTRY, REQUESTS, note_served_models
from proxy.stats.webhook import Webhook
from proxy.testing.server import ServerThread
from tests.conftest import ROOT

RULES = ROOT / "docker" / "prometheus" / "alerts.yaml"
EVENTS = {"AllowlistProxyModelLoopRateHigh", "AllowlistProxyBlockedTurnsHigh", "AllowlistProxyUpstreamDown",
          "AllowlistProxyPolicyReloadRefused", "AllowlistProxyPolicyHeld", "AllowlistProxyStoreDegraded",
          "AllowlistProxyReleaseWaitHigh"}


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not installed (apt-get install prometheus; .ci/run does)")
    return found


def _exported_names() -> set[str]:
    names = set()
    for metric in REGISTRY.collect():
        suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                    "gauge": ("",), "info": ("_info",)}.get(metric.type, ("",))
        names.update(metric.name + suffix for suffix in suffixes)
    return names


def test_every_event_has_a_rule_over_metrics_the_proxy_exports():
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in rules} == EVENTS
    exported = _exported_names()
    for rule in rules:
        used = set(re.findall(r"allowlist_proxy_\w+", rule["expr"]))
        assert used and used <= exported, (rule["alert"], used - exported)


def test_promtool_checks_the_rules():
    result = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_fire_each_alert():
    result = subprocess.run([_promtool(), "test", "rules", "alerts.test.yaml"], cwd=RULES.parent,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    tested = set(re.findall(r"alertname: (\w+)", (RULES.parent / "alerts.test.yaml").read_text()))
    assert tested == EVENTS


# -- the webhook ---------------------------------------------------------------------------------------------

class _Receiver:
    def __init__(self) -> None:
        self.posts: list[dict] = []
        self.url = ""

        async def hook(request: Request) -> Response:
            self.posts.append(json.loads(await request.body()))
            return Response(status_code=204)

        self.app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])


@pytest.fixture
def receiver():
    receiver = _Receiver()
    with ServerThread(receiver.app) as server:
        receiver.url = server.url + "/hook"
        yield receiver


async def test_the_webhook_posts_each_event_once_per_interval(receiver):
    note_served_models(["webhook-model"])  # a label names only a model an upstream serves
    hook = Webhook(receiver.url, interval_seconds=3600)
    try:
        POLICY_VALID.labels(file="webhook-test.yaml").set(0)
        for _ in range(40):
            REQUESTS.labels("webhook-model", "chat", "200").inc()
        LOOPS.labels("webhook-model").inc(10)
        BLOCKED_TURNS.labels("webhook-model").inc(1)  # 2.5%: over the 2% threshold
        await hook.check_once()
        POLICY_VALID.labels(file="webhook-test.yaml").set(1)
        POLICY_VALID.labels(file="webhook-test.yaml").set(0)
        LOOPS.labels("webhook-model").inc(10)
        for _ in range(40):
            REQUESTS.labels("webhook-model", "chat", "200").inc()
        await hook.check_once()  # the same events again within the interval: rate-limited
    finally:
        POLICY_VALID.labels(file="webhook-test.yaml").set(1)
        await hook.stop()
    mine = [(p["event"], p["subject"]) for p in receiver.posts
            if p["subject"] in ("webhook-test.yaml", "webhook-model") and p["status"] == "firing"]
    assert sorted(mine) == [("blocked_turns_high", "webhook-model"), ("model_loop_rate_high", "webhook-model"),
                            ("policy_reload_refused", "webhook-test.yaml")]
    # No blocked turn since the first check: that condition cleared, and is said once.
    cleared = [(p["event"], p["subject"]) for p in receiver.posts
               if p["subject"] == "webhook-model" and p["status"] == "resolved"]
    assert cleared == [("blocked_turns_high", "webhook-model")]
    loop = next(p for p in receiver.posts if p["event"] == "model_loop_rate_high")
    assert "10 of 40 requests (25%)" in loop["detail"] and loop["text"].startswith("allowlist-proxy: ")


async def test_a_condition_that_clears_is_resolved_once_and_a_failed_post_is_tried_again(receiver):
    hook = Webhook(receiver.url, interval_seconds=3600)
    file = "webhook-resolve.yaml"
    try:
        POLICY_VALID.labels(file=file).set(0)
        await hook.check_once()
        await hook.check_once()  # still refused: neither posted again (the interval) nor resolved
        POLICY_VALID.labels(file=file).set(1)
        real_url = hook.url
        hook.url = "http://127.0.0.1:9/hook"  # the receiver is down when the condition clears
        assert not [p for p in await hook.check_once() if p["subject"] == file]
        hook.url = real_url
        resolved = [p for p in await hook.check_once() if p["subject"] == file]
        assert [p["status"] for p in resolved] == ["resolved"]
        assert resolved[0]["text"].startswith("allowlist-proxy: resolved: policy_reload_refused")
        assert not [p for p in await hook.check_once() if p["subject"] == file]  # said once
    finally:
        POLICY_VALID.labels(file=file).set(1)
        await hook.stop()
    mine = [p["status"] for p in receiver.posts if p["subject"] == file]
    assert mine == ["firing", "resolved"]


async def test_a_quiet_model_and_a_down_receiver_post_nothing_and_fail_nothing():
    hook = Webhook("http://127.0.0.1:9/hook", interval_seconds=1)
    try:
        REQUESTS.labels("quiet-model", "chat", "200").inc(100)
        sent = await hook.check_once()
        assert not [p for p in sent if p["subject"] == "quiet-model"]
    finally:
        await hook.stop()


def test_serve_runs_the_webhook_and_the_retention_when_set(upstream, start_proxy, receiver):
    import asyncio

    proxy = start_proxy(upstream.url, alert_webhook_url=receiver.url, retention_days=30)

    async def names() -> set[str]:
        return {task.get_name() for task in asyncio.all_tasks()}

    running = asyncio.run_coroutine_threadsafe(names(), proxy.app.state.loop).result(10)
    assert {"alert-webhook", "store-retention"} <= running
    plain = start_proxy(upstream.url)
    running = asyncio.run_coroutine_threadsafe(names(), plain.app.state.loop).result(10)
    assert not {"alert-webhook", "store-retention"} & running
