"""The walking skeleton: traffic forwarded faithfully, errors in OpenAI's shape, every request recorded."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from proxy.testing.scripted_upstream import Reply
from proxy.testing.server import free_port
from tests.conftest import MODEL, chat, sse_events, sse_json, wait_until


def _without_usage_chunk(raw: bytes) -> bytes:
    blocks = [b for b in raw.split(b"\n\n") if b]
    kept = [b for b in blocks if not (b.startswith(b"data: {") and json.loads(b[6:]).get("choices") == [])]
    return b"".join(b + b"\n\n" for b in kept)


def test_non_streaming_body_is_byte_identical(upstream, proxy):
    upstream.script(Reply(content="Hello there", reasoning="thinking it over",
                          extra_message={"prompt_token_ids": None, "vendor_field": "text-only"}))
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat())
    assert response.status_code == 200
    assert response.content == upstream.responses[-1]
    message = response.json()["choices"][0]["message"]
    assert message["reasoning"] == "thinking it over"
    assert message["vendor_field"] == "text-only"


def test_streaming_is_byte_identical_when_client_asks_for_usage(upstream, proxy):
    upstream.script(Reply(content="Streaming words to you", reasoning="hmm"))
    body = chat(stream=True, stream_options={"include_usage": True})
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content == upstream.responses[-1]
    assert sse_events(response.content)[-1] == "[DONE]"


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_a_thinking_stream_is_byte_identical(upstream, proxy, field):
    """Mostly thinking, as Qwen3.5/3.6 stream it: the thinking chunks take the framed fast path, and what
    goes out is still the upstream's bytes (canonical chunks, so the relay invariant holds)."""
    thinking = "Let me look at the files first. é 中 \"quoted\"\n" * 20
    upstream.script(Reply(content="Here is what I found.", reasoning=thinking, reasoning_field=field,
                          content_chunk=7))
    body = chat(stream=True, stream_options={"include_usage": True})
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=body)
    assert response.content == upstream.responses[-1]
    said = "".join(c["choices"][0]["delta"].get(field) or "" for c in sse_json(response.content) if c["choices"])
    assert said == thinking


def test_usage_chunk_added_for_stats_is_removed_for_the_client(upstream, proxy):
    upstream.script(Reply(content="abc def", prompt_tokens=33, completion_tokens=7))
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat(stream=True))
    assert upstream.requests[-1]["stream_options"] == {"include_usage": True}
    assert response.content == _without_usage_chunk(upstream.responses[-1])
    assert all(chunk.get("choices") for chunk in sse_json(response.content))
    row = proxy.rows("SELECT prompt_tokens, completion_tokens, stream FROM requests")[0]
    assert (row["prompt_tokens"], row["completion_tokens"], row["stream"]) == (33, 7, 1)


def test_unknown_request_fields_reach_the_upstream(upstream, proxy):
    extra = {"chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "low", "top_k": 20,
             "min_p": 0.05, "repetition_penalty": 1.05, "vendor": {"nested": [1, 2]}}
    with proxy.client() as client:
        assert client.post("/v1/chat/completions", json=chat(**extra)).status_code == 200
    sent = upstream.requests[-1]
    for key, value in extra.items():
        assert sent[key] == value


def test_thousand_chunk_stream_arrives_intact(upstream, proxy):
    text = "".join(f"w{i:04d} " for i in range(1000))  # 6 characters each: one chunk per word
    upstream.script(Reply(content=text, content_chunk=6))
    body = chat(stream=True, stream_options={"include_usage": True})
    with proxy.client() as client, client.stream("POST", "/v1/chat/completions", json=body) as response:
        received = b"".join(response.iter_raw())
    assert received == upstream.responses[-1]
    chunks = sse_json(received)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == text
    assert len(chunks) >= 1000


def test_authorization_is_forwarded_or_replaced(upstream, proxy, start_proxy):
    with proxy.client() as client:
        client.post("/v1/chat/completions", json=chat(), headers={"Authorization": "Bearer client-key"})
    assert upstream.headers[-1]["authorization"] == "Bearer client-key"
    keyed = start_proxy(upstream.url, upstream_api_key="server-key")
    with keyed.client() as client:
        client.post("/v1/chat/completions", json=chat(), headers={"Authorization": "Bearer client-key"})
    assert upstream.headers[-1]["authorization"] == "Bearer server-key"


# ------------------------------------------------------------------ errors


def _assert_openai_error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    return error


def test_malformed_json_is_a_400(proxy):
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", content=b'{"model": "x", "messages": [',
                               headers={"content-type": "application/json"})
    _assert_openai_error(response, 400)


@pytest.mark.parametrize("body", [b"[1, 2]", b'{"model": 5, "messages": []}', b'{"model": "m"}', b"\xff\xfe"])
def test_wrong_shapes_are_a_400(proxy, body):
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", content=body)
    _assert_openai_error(response, 400)


def test_body_over_the_limit_is_a_413(upstream, start_proxy):
    small = start_proxy(upstream.url, max_body_bytes=1000)
    with small.client() as client:
        response = client.post("/v1/chat/completions", json=chat([{"role": "user", "content": "x" * 2000}]))
    _assert_openai_error(response, 413)


def test_unreachable_upstream_is_a_502(start_proxy):
    dead = start_proxy(f"http://127.0.0.1:{free_port()}/v1")
    with dead.client() as client:
        response = client.post("/v1/chat/completions", json=chat())
        streamed = client.post("/v1/chat/completions", json=chat(stream=True))
        health = client.get("/health").json()
    assert _assert_openai_error(response, 502)["type"] == "upstream_error"
    _assert_openai_error(streamed, 502)
    assert health["upstream_reachable"] is False
    rows = dead.rows("SELECT outcome, status FROM requests")
    assert [tuple(r) for r in rows] == [("upstream_error", 502), ("upstream_error", 502)]


def test_stalled_upstream_is_a_504(upstream, start_proxy):
    slow = start_proxy(upstream.url, read_timeout=0.3)
    upstream.script(Reply(stall=1.0), Reply(stall=1.0))
    with slow.client() as client:
        _assert_openai_error(client.post("/v1/chat/completions", json=chat()), 504)
        _assert_openai_error(client.post("/v1/chat/completions", json=chat(stream=True)), 504)


def test_upstream_error_body_passes_through_with_its_status(upstream, proxy):
    upstream.script(Reply(status=400, error_message="This model's maximum context length is 65536 tokens."))
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat())
    assert response.status_code == 400
    assert response.content == b'{"error":{"message":"This model\'s maximum context length is 65536 tokens.",' \
                               b'"type":"BadRequestError","param":null,"code":400}}'


def test_upstream_dropping_mid_stream_ends_with_an_error_chunk(upstream, proxy):
    upstream.script(Reply(content="a long answer " * 10, drop_after=5))
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat(stream=True))
    events = sse_events(response.content)
    assert events[-1] == "[DONE]"
    assert "error" in json.loads(events[-2])
    assert proxy.rows("SELECT outcome FROM requests")[0]["outcome"] == "upstream_error"


def test_client_disconnect_cancels_upstream_and_is_recorded(upstream, proxy):
    upstream.script(Reply(content="x" * 400, content_chunk=2, chunk_delay=0.02))
    with proxy.client() as client, client.stream("POST", "/v1/chat/completions", json=chat(stream=True)) as r:
        iterator = r.iter_raw()
        next(iterator)
        closed_at = time.monotonic()
    assert wait_until(lambda: upstream.disconnects == 1, timeout=3)
    assert upstream.disconnected_at[0] - closed_at < 1.0
    assert wait_until(lambda: proxy.rows("SELECT outcome FROM requests WHERE outcome='client_disconnected'"))


# ------------------------------------------------------------------ models


def test_unknown_model_is_a_404_listing_served_names(proxy):
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json={**chat(), "model": "Qwen/Qwen3.5-27B"})
    error = _assert_openai_error(response, 404)
    assert error["code"] == "model_not_found"
    assert MODEL in error["message"] and "qwen3.6-35b-a3b" in error["message"]


def test_model_alias_is_rewritten(upstream, start_proxy):
    aliased = start_proxy(upstream.url, model_aliases={"Qwen/Qwen3.5-27B": MODEL})
    with aliased.client() as client:
        response = client.post("/v1/chat/completions", json={**chat(), "model": "Qwen/Qwen3.5-27B"})
    assert response.status_code == 200
    assert upstream.requests[-1]["model"] == MODEL


def test_models_list_is_forwarded(proxy):
    with proxy.client() as client:
        names = [m["id"] for m in client.get("/v1/models").json()["data"]]
    assert names == [MODEL, "qwen3.6-35b-a3b"]


def test_other_routes_pass_through(upstream, proxy):
    with proxy.client() as client:
        response = client.post("/v1/tokenize", json={"model": MODEL, "prompt": "one two three"})
    assert response.json()["count"] == 3


# ------------------------------------------------------------------ store and sessions


def test_rows_are_written_through_the_real_migrations(upstream, proxy):
    upstream.script(Reply(content="hello", prompt_tokens=100, completion_tokens=5, cached_tokens=64))
    with proxy.client() as client:
        client.post("/v1/chat/completions", json=chat(), headers={"x-session-id": "ses_abc"})
    from alembic.script import ScriptDirectory

    from proxy.store.db import alembic_config

    version = proxy.rows("SELECT version_num FROM alembic_version")[0][0]
    assert version == ScriptDirectory.from_config(alembic_config()).get_current_head()
    row = proxy.rows("SELECT * FROM requests")[0]
    assert row["session_id"] == "ses_abc" and row["model"] == MODEL and row["route"] == "chat"
    assert (row["prompt_tokens"], row["completion_tokens"], row["cached_tokens"]) == (100, 5, 64)
    assert row["status"] == 200 and row["outcome"] == "ok" and row["attempts"] == 1
    assert row["concurrency"] == 1 and row["duration_ms"] > 0 and row["ttfb_ms"] is not None
    assert row["policy_name"] and row["policy_hash"]
    session = proxy.rows("SELECT * FROM sessions")[0]
    assert (session["id"], session["source"]) == ("ses_abc", "header")


def test_sessions_follow_the_header(upstream, proxy):
    with proxy.client() as client:
        for session in ("ses_one", "ses_two", "ses_one"):
            client.post("/v1/chat/completions", json=chat(), headers={"x-session-id": session})
    rows = proxy.rows("SELECT session_id FROM requests ORDER BY started_at")
    assert [r[0] for r in rows] == ["ses_one", "ses_two", "ses_one"]
    assert proxy.rows("SELECT count(*) FROM sessions")[0][0] == 2
    # A client that names its sessions needs no lineage: nothing is hashed or stored for it.
    assert proxy.rows("SELECT count(*) FROM session_lineage")[0][0] == 0


def test_sessions_follow_lineage_without_a_header(upstream, proxy):
    upstream.script(Reply(content="first answer"), Reply(content="second answer"), Reply(content="other"))
    first = [{"role": "system", "content": "You are a coder."}, {"role": "user", "content": "task A"}]
    with proxy.client() as client:
        client.post("/v1/chat/completions", json=chat(first))
        follow = [*first, {"role": "assistant", "content": "first answer"}, {"role": "user", "content": "more"}]
        client.post("/v1/chat/completions", json=chat(follow, stream=True))
        other = [{"role": "system", "content": "You are a coder."}, {"role": "user", "content": "task B"}]
        client.post("/v1/chat/completions", json=chat(other))
    rows = [r[0] for r in proxy.rows("SELECT session_id FROM requests ORDER BY started_at")]
    assert rows[0] == rows[1] != rows[2]
    assert rows[0].startswith("lin_")
    assert proxy.rows("SELECT count(*) FROM session_lineage")[0][0] > 0


def test_concurrency_at_start_is_recorded(upstream, proxy):
    import concurrent.futures

    for _ in range(4):
        upstream.script(Reply(content="slow", stall=0.3))
    with concurrent.futures.ThreadPoolExecutor(4) as pool, proxy.client() as client:
        list(pool.map(lambda _: client.post("/v1/chat/completions", json=chat()), range(4)))
    levels = sorted(r[0] for r in proxy.rows("SELECT concurrency FROM requests"))
    assert levels[-1] >= 2


def test_health_reports_upstream(proxy):
    with proxy.client() as client:
        health = client.get("/health").json()
    assert health["status"] == "ok" and health["upstream_reachable"] is True


def test_raw_completions_are_forwarded_and_recorded(upstream, proxy):
    upstream.script(Reply(content="def f():\n    return 1", prompt_tokens=9, completion_tokens=4))
    with proxy.client() as client:
        response = client.post("/v1/completions", json={"model": MODEL, "prompt": "def f():"},
                               headers={"x-session-id": "ses_raw"})
    assert response.status_code == 200
    assert response.content == upstream.responses[-1]
    assert response.json()["choices"][0]["text"] == "def f():\n    return 1"
    row = proxy.rows("SELECT route, session_id, prompt_tokens, completion_tokens FROM requests")[0]
    assert tuple(row) == ("completions", "ses_raw", 9, 4)
