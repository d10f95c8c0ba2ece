"""OpenTelemetry traces against a real OTLP/HTTP receiver started in the test process (an HTTP server on
127.0.0.1 decoding each `ExportTraceServiceRequest` with opentelemetry-proto): one span per client request,
with a child per upstream attempt, per judged call and per release wait, the GenAI semantic conventions and
the proxy's own attributes; a client's `traceparent` continued and the upstream handed the request span's.
Off unless configured, and then nothing of OpenTelemetry's SDK is loaded."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed (it is in .[test])")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy import tracing
from proxy.config import Settings
from proxy.stats.traces import traces_endpoint
from proxy.testing.characters import OPENCODE_TOOLS
from proxy.testing.scripted_upstream import Reply
from proxy.testing.server import ServerThread
from tests.conftest import MODEL, ROOT, chat, wait_until

ALLOWED = 'uv run scripts/search.py "rust async"'
PIPED = f"{ALLOWED} | head -5"
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_PARENT = "00f067aa0ba902b7"


@pytest.fixture
def backend() -> str:
    return "sqlite"


class Collector:
    """An OTLP/HTTP trace receiver: POST /v1/traces, protobuf bodies, every span kept as a plain dict."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.content_types: list[str] = []
        self._lock = threading.Lock()

        async def traces(request: Request) -> Response:
            self.content_types.append(request.headers.get("content-type", ""))
            export = ExportTraceServiceRequest.FromString(await request.body())
            with self._lock:
                for resource_spans in export.resource_spans:
                    resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            self.spans.append({
                                "name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex(), "kind": span.kind,
                                "start": span.start_time_unix_nano, "end": span.end_time_unix_nano,
                                "status": span.status.code, "resource": resource,
                                "attributes": {a.key: _value(a.value) for a in span.attributes}})
            return Response(b"", status_code=200, media_type="application/x-protobuf")

        self.app = Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@pytest.fixture
def collector():
    receiver = Collector()
    with ServerThread(receiver.app) as server:
        receiver.url = server.url  # type: ignore[attr-defined]
        yield receiver


def _flush(proxy) -> None:
    assert proxy.services.traces is not None
    assert proxy.services.traces.flush(10)


def _roots(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in spans if s["kind"] == 2]  # SPAN_KIND_SERVER


def _children(spans: list[dict[str, Any]], parent: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted((s for s in spans if s["parent"] == parent["span_id"]), key=lambda s: s["start"])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_request_is_one_span_with_its_attempts_judgings_and_release_wait(upstream, start_proxy, collector, stream):
    proxy = start_proxy(upstream.url, otel_endpoint=collector.url)
    # A rejected call, fed back, then an allowed one: two attempts, two judged calls, one release wait.
    upstream.script(Reply(tool_calls=[("bash", {"command": PIPED})], prompt_tokens=30, completion_tokens=7),
                    Reply(tool_calls=[("bash", {"command": ALLOWED})], prompt_tokens=40, completion_tokens=9))
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", headers={"x-session-id": f"ses_trace_{stream}"},
                               json=chat(tools=OPENCODE_TOOLS, stream=stream))
    assert response.status_code == 200, response.text
    _flush(proxy)
    assert wait_until(lambda: _roots(collector.spans), timeout=10)
    assert all(ct == "application/x-protobuf" for ct in collector.content_types)

    (root,) = _roots(collector.spans)
    attrs = root["attributes"]
    assert root["name"] == f"chat {MODEL}" and root["parent"] == ""
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "vllm" and attrs["gen_ai.system"] == "vllm"
    assert attrs["gen_ai.request.model"] == MODEL and attrs["gen_ai.response.model"] == MODEL
    assert attrs["gen_ai.usage.input_tokens"] == 70 and attrs["gen_ai.usage.output_tokens"] == 16
    assert attrs["allowlist.session"] == f"ses_trace_{stream}"
    assert attrs["allowlist.decision"] == "reject" and attrs["allowlist.reasons"] == ["pipe"]
    assert attrs["allowlist.outcome"] == "ok" and attrs["allowlist.attempts"] == 2
    assert root["resource"]["service.name"] == "allowlist-proxy"

    children = _children(collector.spans, root)
    assert {s["trace_id"] for s in children} == {root["trace_id"]}
    attempts = [s for s in children if s["kind"] == 3]  # SPAN_KIND_CLIENT
    judgings = [s for s in children if s["name"].startswith("judge ")]
    waits = [s for s in children if s["name"] == "allowlist.release_wait"]
    assert len(children) == len(attempts) + len(judgings) + len(waits)
    assert [s["attributes"]["allowlist.attempt"] for s in attempts] == [1, 2]
    for attempt in attempts:
        assert attempt["name"] == f"chat {MODEL}"
        assert attempt["attributes"]["gen_ai.request.model"] == MODEL
        assert attempt["attributes"]["server.address"] == "127.0.0.1"
        assert attempt["attributes"]["allowlist.outcome"] == "ok"
    assert [(s["attributes"]["gen_ai.tool.name"], s["attributes"]["allowlist.decision"],
             s["attributes"]["allowlist.reasons"]) for s in judgings] == [("bash", "reject", ["pipe"]),
                                                                         ("bash", "allow", [])]
    assert all(s["attributes"].get("gen_ai.tool.call.id") for s in judgings)
    assert len(waits) == 1  # enforce mode: the allowed call waited for its rows before release
    for span in children:  # every child inside its request
        assert root["start"] <= span["start"] <= span["end"] <= root["end"], span["name"]
    assert attempts[0]["end"] <= judgings[0]["end"] and judgings[1]["end"] <= waits[0]["end"]
    # No text of the conversation or of the calls leaves the machine.
    flat = repr(collector.spans)
    assert "rust async" not in flat and "head -5" not in flat


def test_a_clients_traceparent_is_continued_and_the_upstream_gets_the_request_span(upstream, start_proxy,
                                                                                      collector):
    proxy = start_proxy(upstream.url, otel_endpoint=collector.url)
    upstream.script(Reply(content="plain words"))
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat(), headers={
            "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_PARENT}-01", "x-session-id": "ses_tp"})
    assert response.status_code == 200
    _flush(proxy)
    assert wait_until(lambda: _roots(collector.spans), timeout=10)
    (root,) = _roots(collector.spans)
    assert root["trace_id"] == CLIENT_TRACE and root["parent"] == CLIENT_PARENT
    sent = upstream.headers[-1]["traceparent"]
    assert sent.startswith(f"00-{CLIENT_TRACE}-{root['span_id']}-")  # vLLM's spans join under the request's
    assert "allowlist.decision" not in root["attributes"]  # no call was judged


def test_an_upstream_failure_is_an_error_span(start_proxy, collector):
    proxy = start_proxy("http://127.0.0.1:9/v1", otel_endpoint=collector.url)
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat(), headers={"x-session-id": "ses_down"})
    assert response.status_code == 502
    _flush(proxy)
    assert wait_until(lambda: _roots(collector.spans), timeout=10)
    (root,) = _roots(collector.spans)
    assert root["status"] == 2 and root["attributes"]["error.type"] == "upstream_error"  # STATUS_CODE_ERROR
    assert "gen_ai.response.model" not in root["attributes"]
    (attempt,) = [s for s in _children(collector.spans, root) if s["kind"] == 3]
    assert attempt["status"] == 2 and attempt["attributes"]["error.type"] == "error"


def test_tracing_is_off_unless_an_endpoint_is_given(upstream, start_proxy, monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    proxy = start_proxy(upstream.url)
    assert proxy.services.traces is None and not tracing.on()
    assert traces_endpoint(None, {}) is None
    assert traces_endpoint(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == "http://c:4318/v1/traces"
    assert traces_endpoint(None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/x"}) == "http://c:4318/x"
    assert traces_endpoint(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}) is None
    named = Settings.of(otel_endpoint="http://collector:4318").telemetry.otel_endpoint
    assert traces_endpoint(named, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318"}) == \
        "http://collector:4318/v1/traces"


def test_the_standard_variable_turns_it_on(upstream, start_proxy, collector, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    proxy = start_proxy(upstream.url)
    assert proxy.services.traces is not None and tracing.on()
    upstream.script(Reply(content="hello"))
    with proxy.client() as client:
        assert client.post("/v1/chat/completions", json=chat()).status_code == 200
    _flush(proxy)
    assert wait_until(lambda: _roots(collector.spans), timeout=10)


def test_an_untraced_serve_loads_no_opentelemetry_sdk():
    code = ("import os, sys, asyncio\n"
            "for k in ('OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'): os.environ.pop(k, None)\n"
            "from proxy.cli import build_parser\n"
            "build_parser()\n"
            "import proxy.http.app, proxy.services, proxy.enforce.prelude, proxy.enforce.judging\n"
            "from proxy.stats.traces import start_traces\n"
            "assert start_traces(None) is None\n"
            "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter',\n"
            "      'google.protobuf', 'proxy.stats.otel'))))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_setting_asking_for_traces_without_the_sdk_is_one_clear_error(monkeypatch, tmp_path):
    from proxy.stats.traces import TracesUnavailable, check_available, start_traces

    monkeypatch.setitem(sys.modules, "proxy.stats.otel", None)  # as if the [otel] extra were not installed
    with pytest.raises(TracesUnavailable, match=r"allowlist-proxy\[otel\]"):
        start_traces("http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert start_traces(None) is None  # only the shared environment asks: a warning, no tracing
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)
    with pytest.raises(TracesUnavailable):
        check_available("http://127.0.0.1:4318")
    check_available(None)
    done = subprocess.run([sys.executable, "-c", "import sys; sys.modules['opentelemetry.sdk'] = None\n"
                           "from proxy.cli import main; raise SystemExit(main(sys.argv[1:]))", "serve",
                           "--otel-endpoint", "http://127.0.0.1:4318", "--db", f"sqlite:///{tmp_path / 'x.db'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "setting otel_endpoint" in done.stderr and "Traceback" not in done.stderr
