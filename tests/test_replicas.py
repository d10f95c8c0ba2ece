"""Two proxy processes' worth of state sharing one database: sessions continue across replicas."""

from __future__ import annotations

import pytest

from proxy.testing.scripted_upstream import Reply
from tests.conftest import chat

pytestmark = pytest.mark.each_database


def test_consecutive_requests_of_one_session_on_different_replicas(upstream, start_proxy):
    first_replica = start_proxy(upstream.url)
    second_replica = start_proxy(upstream.url, db=first_replica.db_url)
    upstream.script(Reply(content="first answer"), Reply(content="second answer"), Reply(content="third"))
    opening = [{"role": "system", "content": "You are a coder."}, {"role": "user", "content": "task A"}]
    with first_replica.client() as client:
        client.post("/v1/chat/completions", json=chat(opening))
    first_replica.flush()
    follow = [*opening, {"role": "assistant", "content": "first answer"}, {"role": "user", "content": "go on"}]
    with second_replica.client() as client:
        client.post("/v1/chat/completions", json=chat(follow, stream=True))
    second_replica.flush()
    third = [*follow, {"role": "assistant", "content": "second answer"}, {"role": "user", "content": "and?"}]
    with first_replica.client() as client:
        client.post("/v1/chat/completions", json=chat(third))
    sessions = [r[0] for r in first_replica.rows("SELECT session_id FROM requests ORDER BY started_at")]
    assert len(sessions) == 3 and len(set(sessions)) == 1


def test_stats_are_identical_from_either_replica(upstream, start_proxy):
    first_replica = start_proxy(upstream.url)
    second_replica = start_proxy(upstream.url, db=first_replica.db_url)
    upstream.script(*[Reply(content=f"answer {i}") for i in range(4)])
    for i, replica in enumerate((first_replica, second_replica, first_replica, second_replica)):
        with replica.client() as client:
            client.post("/v1/chat/completions", json=chat(), headers={"x-session-id": f"ses_r{i % 2}"})
        replica.flush()
    with first_replica.client() as a, second_replica.client() as b:
        left, right = a.get("/stats/models").json(), b.get("/stats/models").json()
    assert left == right
    assert left["models"][0]["requests"] == 4 and left["models"][0]["sessions"] == 2


def test_a_responses_chain_continues_on_another_replica_without_waiting(upstream, start_proxy, backend):
    """A streamed turn retried on one replica gave the client the first attempt's id; the next turn, sent at once to
    the other replica, continues upstream from the attempt the client got (proxy/sessions/response_chains.py)."""
    import json

    from tests.test_dialects import ALLOWED, PIPED, named_events, responses_body

    if backend != "postgres":
        pytest.skip("replicas share a server database; on SQLite a second process is a worker (tests/test_workers.py)")
    first_replica = start_proxy(upstream.url)
    second_replica = start_proxy(upstream.url, db=first_replica.db_url)
    upstream.store_responses = True
    upstream.script(Reply(content="", tool_calls=[("bash", {"command": PIPED})]),
                    Reply(content="", tool_calls=[("bash", {"command": ALLOWED})]), Reply(content="Done."))
    with first_replica.client() as client:
        response = client.post("/v1/responses", json=responses_body(stream=True))
    events = named_events(response.content)
    client_id = next(d for n, d in events if n == "response.created")["response"]["id"]
    output = next(d for n, d in events if n == "response.completed")["response"]["output"]
    (call,) = [item for item in output if item["type"] == "function_call"]
    assert json.loads(call["arguments"])["command"] == ALLOWED
    follow = responses_body(stream=True, previous_response_id=client_id,
                            input=[{"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}])
    with second_replica.client() as client:  # no flush: the chain was committed before the first answer ended
        assert client.post("/v1/responses", json=follow).status_code == 200
    sent = upstream.requests[-1]["previous_response_id"]
    assert sent is not None and sent != client_id
