"""Several upstreams behind one proxy, routed by model; and what a request's record says when it ends blocked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxy.testing.characters import OPENCODE_TOOLS, bash_sequence
from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from proxy.testing.server import ServerThread, free_port
from tests.conftest import MODEL

DENSE, MOE = MODEL, "qwen3.6-35b-a3b"


@pytest.fixture
def backend() -> str:
    return "sqlite"  # routing does not depend on the database


@pytest.fixture
def two_upstreams() -> Iterator[tuple[ScriptedUpstream, ScriptedUpstream]]:
    dense, moe = ScriptedUpstream(models=[DENSE]), ScriptedUpstream(models=[MOE])
    with ServerThread(dense.app) as a, ServerThread(moe.app) as b:
        dense.url, moe.url = a.url + "/v1", b.url + "/v1"
        yield dense, moe


def _ask(client, model: str, stream: bool = False):
    return client.post("/v1/chat/completions", headers={"x-session-id": f"ses_{model}"},
                       json={"model": model, "messages": [{"role": "user", "content": "go"}], "stream": stream})


@pytest.mark.parametrize("listed", [False, True], ids=["auto", "listed"])
def test_each_model_goes_to_the_upstream_that_serves_it(two_upstreams, start_proxy, listed):
    dense, moe = two_upstreams
    upstreams = [{"url": dense.url, "models": [DENSE] if listed else "auto"},
                 {"url": moe.url, "api_key": "moe-key"}]
    proxy = start_proxy("http://127.0.0.1:9/v1", upstreams=upstreams)
    dense.script(Reply(content="from the dense one"))
    moe.script(Reply(content="from the moe one"), Reply(content="streamed moe"))
    with proxy.client() as client:
        assert "dense one" in _ask(client, DENSE).text
        assert "moe one" in _ask(client, MOE).text
        assert "[DONE]" in _ask(client, MOE, stream=True).text
        listing = client.get("/v1/models").json()
        missing = _ask(client, "gpt-4o")
    assert [r["model"] for r in dense.requests] == [DENSE]
    assert [r["model"] for r in moe.requests] == [MOE, MOE]
    assert moe.headers[-1]["authorization"] == "Bearer moe-key"  # each upstream's own key
    assert sorted(m["id"] for m in listing["data"]) == sorted([DENSE, MOE])
    assert missing.status_code == 404
    assert DENSE in missing.json()["error"]["message"] and MOE in missing.json()["error"]["message"]
    rows = proxy.rows("SELECT model, upstream FROM requests ORDER BY started_at")
    assert [(r["model"], r["upstream"]) for r in rows] == [(DENSE, dense.url), (MOE, moe.url), (MOE, moe.url)]


def test_an_unreachable_upstream_does_not_hide_the_others(two_upstreams, start_proxy):
    dense, _moe = two_upstreams
    dead = f"http://127.0.0.1:{free_port()}/v1"
    proxy = start_proxy("http://127.0.0.1:9/v1", upstreams=[{"url": dead}, {"url": dense.url}])
    with proxy.client() as client:
        assert _ask(client, DENSE).status_code == 200
        assert _ask(client, MOE).status_code == 502  # maybe the dead one serves it: its failure is the answer
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == [DENSE]
        health = client.get("/health").json()
    assert health["upstream_reachable"] is False


@pytest.mark.parametrize("stream", [False, True])
def test_a_spent_budget_is_recorded_as_blocked_with_its_reasons(upstream, proxy, stream):
    upstream.responder = bash_sequence(["curl -s https://example.com | head -5"] * 10)
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", headers={"x-session-id": "ses_blocked"}, json={
            "model": MODEL, "messages": [{"role": "user", "content": "go"}], "tools": OPENCODE_TOOLS,
            "stream": stream})
    assert response.status_code == 200
    (row,) = proxy.rows("SELECT outcome, error, attempts FROM requests")
    assert row["outcome"] == "blocked" and row["attempts"] == 4
    assert "pipe" in row["error"] and "curl -s https://example.com | head -5" in row["error"]
