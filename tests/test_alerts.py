"""The Prometheus alerting rules beside the Grafana dashboard: valid, firing on the events they name
(promtool's unit tests in docker/prometheus/alerts.test.yaml), and written over metrics the proxy exports."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from proxy.stats.prometheus import REGISTRY
from tests.conftest import ROOT

RULES = ROOT / "docker" / "prometheus" / "alerts.yaml"
EVENTS = {"AllowlistProxyModelLoopRateHigh", "AllowlistProxyBlockedTurnsHigh", "AllowlistProxyUpstreamDown",
          "AllowlistProxyPolicyReloadRefused", "AllowlistProxyStoreDegraded", "AllowlistProxyReleaseWaitHigh"}


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
