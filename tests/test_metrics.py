"""GET /metrics: Prometheus text that prometheus-client's own parser reads, with the values scripted traffic made.

The metrics registry lives as long as the process, so each test talks to a model name of its own and the
unlabelled metrics are compared before and after.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy import __version__
from proxy.testing.characters import OPENCODE_TOOLS
from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from proxy.testing.server import ServerThread
from tests.conftest import STRICT_POLICY, RunningProxy, wait_until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
EXPECTED = {
    "allowlist_proxy_requests": "counter",
    "allowlist_proxy_tool_calls": "counter",
    "allowlist_proxy_retries": "counter",
    "allowlist_proxy_budget_exhausted": "counter",
    "allowlist_proxy_loops": "counter",
    "allowlist_proxy_upstream_seconds": "histogram",
    "allowlist_proxy_request_seconds": "histogram",
    "allowlist_proxy_blocked_turns": "counter",
    "allowlist_proxy_model_not_found": "counter",
    "allowlist_proxy_build_info": "gauge",
    "allowlist_proxy_upstream_up": "gauge",
    "allowlist_proxy_upstream_first_token_seconds": "histogram",
    "allowlist_proxy_tokens": "counter",
    "allowlist_proxy_in_flight": "gauge",
    "allowlist_proxy_policy_reload_failures": "counter",
    "allowlist_proxy_policy_valid": "gauge",
    "allowlist_proxy_policy_held": "gauge",
    "allowlist_proxy_store_write_failures": "counter",
    "allowlist_proxy_store_queue_depth": "gauge",
}


@pytest.fixture
def backend() -> str:
    return "sqlite"  # metrics do not depend on the database; the store's own tests cover Postgres


def families(proxy: RunningProxy, token: str | None = None) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with proxy.client() as client:
        response = client.get("/metrics", headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def scrape(proxy: RunningProxy, token: str | None = None) -> Samples:
    samples: Samples = {}
    for family in families(proxy, token).values():
        for s in family.samples:
            samples[s.name, tuple(sorted(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def model_upstream() -> Iterator[tuple[str, ScriptedUpstream]]:
    model = f"metrics-{uuid.uuid4().hex[:8]}"
    scripted = ScriptedUpstream(models=[model])
    with ServerThread(scripted.app) as server:
        scripted.url = server.url + "/v1"
        yield model, scripted


def _bash(command: str) -> Reply:
    return Reply(tool_calls=[("bash", {"command": command})], prompt_tokens=10, completion_tokens=5)


def test_metrics_carry_the_scripted_traffic(model_upstream, start_proxy: Callable[..., RunningProxy]):
    model, upstream = model_upstream
    proxy = start_proxy(upstream.url)
    before = scrape(proxy)
    search = 'uv run scripts/search.py "rust async"'
    upstream.script(
        # 1: plain text, whole.
        Reply(content="hello", prompt_tokens=10, completion_tokens=5),
        # 2: a looping model: four piped variants, the budget (3 retries) spent, one loop of four.
        _bash(f"{search} | head -5"), _bash(f"{search} | head -10"), _bash(f"{search} | tail -3"),
        _bash(f"{search} | head -1"),
        # 3: an allowed call, streamed.
        _bash(search),
        # 4: arguments that are not JSON (malformed), then text; streamed.
        Reply(tool_calls=[("bash", '{"command": "uv run')], prompt_tokens=10, completion_tokens=5),
        Reply(content="sorry", prompt_tokens=10, completion_tokens=5),
    )
    asks = [(False, "ses_m1"), (False, "ses_m2"), (True, "ses_m3"), (True, "ses_m4")]
    with proxy.client() as client:
        for stream, session in asks:
            body = {"model": model, "messages": [{"role": "user", "content": "go"}], "tools": OPENCODE_TOOLS,
                    "stream": stream}
            response = client.post("/v1/chat/completions", json=body, headers={"x-session-id": session})
            assert response.status_code == 200
    proxy.flush()
    after = scrape(proxy)

    assert value(after, "allowlist_proxy_requests_total", model_name=model, route="chat", status="200") == 4
    calls = {(d, r): value(after, "allowlist_proxy_tool_calls_total", model_name=model, decision=d, reason=r)
             for d, r in [("reject", "pipe"), ("allow", ""), ("malformed", "bad_arguments")]}
    assert calls == {("reject", "pipe"): 4, ("allow", ""): 1, ("malformed", "bad_arguments"): 1}
    assert value(after, "allowlist_proxy_retries_total", model_name=model) == 4
    assert value(after, "allowlist_proxy_budget_exhausted_total", model_name=model) == 1
    assert value(after, "allowlist_proxy_loops_total", model_name=model) == 1  # counted once, at its third call
    # Each upstream attempt timed on its own (8: 1 + 4 + 1 + 2), each client request once, by its outcome.
    attempts = value(after, "allowlist_proxy_upstream_seconds_count", model_name=model, upstream=upstream.url,
                     outcome="ok")
    assert attempts == 8
    assert value(after, "allowlist_proxy_request_seconds_count", model_name=model, outcome="ok") == 3
    assert value(after, "allowlist_proxy_request_seconds_count", model_name=model, outcome="blocked") == 1
    assert value(after, "allowlist_proxy_request_seconds_bucket", model_name=model, outcome="ok", le="+Inf") == 3
    assert value(after, "allowlist_proxy_blocked_turns_total", model_name=model) == 1
    assert value(after, "allowlist_proxy_upstream_up", upstream=upstream.url) == 1
    assert value(after, "allowlist_proxy_build_info", version=__version__) == 1
    assert not any(name.endswith("_created") for name, _labels in after)
    assert value(after, "allowlist_proxy_upstream_first_token_seconds_count", model_name=model) == 2  # streamed only
    # Usage adds up over the attempts: 8 upstream answers of 10 prompt and 5 completion tokens.
    assert value(after, "allowlist_proxy_tokens_total", model_name=model, kind="prompt") == 80
    assert value(after, "allowlist_proxy_tokens_total", model_name=model, kind="completion") == 40
    assert value(after, "allowlist_proxy_in_flight", model_name=model) == 0
    assert value(after, "allowlist_proxy_store_queue_depth") == 0  # flushed
    assert value(after, "allowlist_proxy_store_write_failures_total") == value(
        before, "allowlist_proxy_store_write_failures_total")
    # Declared with their types even before anything happened to them.
    declared = {name: family.type for name, family in families(proxy).items()}
    assert {name: declared.get(name) for name in EXPECTED} == EXPECTED


def test_in_flight_gauge_counts_a_running_stream(model_upstream, start_proxy):
    model, upstream = model_upstream
    proxy = start_proxy(upstream.url)
    upstream.script(Reply(content="slow words", chunk_delay=0.3, content_chunk=2))
    with proxy.client() as client, client.stream(
            "POST", "/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "x"}],
                                                  "stream": True}) as response:
        assert wait_until(lambda: value(scrape(proxy), "allowlist_proxy_in_flight", model_name=model) == 1)
        response.read()
    assert value(scrape(proxy), "allowlist_proxy_in_flight", model_name=model) == 0


def test_a_refused_policy_edit_is_counted(tmp_path: Path, upstream, start_proxy):
    policy = tmp_path / "strict.yaml"
    shutil.copy(STRICT_POLICY, policy)
    proxy = start_proxy(upstream.url, policy=policy)
    file = str(policy)
    failures = value(scrape(proxy), "allowlist_proxy_policy_reload_failures_total", file=file)
    assert value(scrape(proxy), "allowlist_proxy_policy_valid", file=file) == 1
    time.sleep(0.3)  # a new modification time for the watcher
    policy.write_text(policy.read_text().replace("retry_budget: 3", "retry_budget: many"))
    assert wait_until(lambda: value(scrape(proxy), "allowlist_proxy_policy_valid", file=file) == 0, timeout=10)
    assert value(scrape(proxy), "allowlist_proxy_policy_reload_failures_total", file=file) == failures + 1


def test_metrics_need_the_admin_token_when_one_is_set(upstream, start_proxy):
    proxy = start_proxy(upstream.url, admin_token="s3cret")
    with proxy.client() as client:
        assert client.get("/metrics").status_code == 401
    assert "allowlist_proxy_in_flight" in families(proxy, token="s3cret")


def test_a_model_no_upstream_serves_is_counted(model_upstream, start_proxy):
    model, upstream = model_upstream
    proxy = start_proxy(upstream.url)
    with proxy.client() as client:
        response = client.post("/v1/chat/completions",
                               json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 404 and model in response.json()["error"]["message"]
    # Counted under "other": a name no upstream serves never becomes a label value of its own (issue 26).
    assert value(scrape(proxy), "allowlist_proxy_model_not_found_total", model_name="other") >= 1


def test_unknown_model_names_never_take_the_label_room_of_served_models(model_upstream, start_proxy):
    model, upstream = model_upstream
    proxy = start_proxy(upstream.url)
    with proxy.client() as client:
        for i in range(210):
            client.post("/v1/chat/completions",
                        json={"model": f"nope-{i}", "messages": [{"role": "user", "content": "x"}]})
        assert client.post("/v1/chat/completions",
                           json={"model": model, "messages": [{"role": "user", "content": "x"}]}).status_code == 200
    metrics = scrape(proxy)
    assert not any(("model_name", f"nope-{i}") in labels for (_name, labels) in metrics for i in range(210))
    assert value(metrics, "allowlist_proxy_requests_total", model_name=model, route="chat",
                 status="200") >= 1


def test_every_event_is_counted_by_the_metrics_listener():
    """The proxy's parts emit events (proxy/telemetry.py) and import no metric: an event the listener does not
    handle would vanish from /metrics without a sound."""
    import dataclasses
    import inspect

    from proxy import telemetry
    from proxy.stats import prometheus

    kinds = {c for _, c in inspect.getmembers(telemetry, inspect.isclass)
             if c.__module__ == telemetry.__name__ and dataclasses.is_dataclass(c)}
    assert kinds and kinds == set(prometheus._HANDLERS)


def test_an_emitted_event_moves_its_series():
    from proxy import telemetry
    from proxy.stats.prometheus import REGISTRY

    model = f"m-{uuid.uuid4().hex[:8]}"
    # An unserved model name reads "other" (bounded labels): count that series before and after instead.
    before = REGISTRY.get_sample_value("allowlist_proxy_store_refusals_total", {"model_name": "other"}) or 0.0
    telemetry.emit(telemetry.StoreRefused(model))
    assert REGISTRY.get_sample_value("allowlist_proxy_store_refusals_total", {"model_name": "other"}) == before + 1
