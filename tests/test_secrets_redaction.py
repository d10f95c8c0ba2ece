"""Secrets stopped where they enter the model (DESIGN invariant 11), through the real proxy on every route: a
scripted model reads a file with a tool, the client sends the file's text back as the tool's result, and the
upstream (which records every request) sees `[redacted: TYPE]` where the secret was, while the client's own copy
is untouched; the store, `/stats`, the session page and `/metrics` count it; the secret is in none of them, nor
in the SQLite file or the logs. The redacted bytes are the same request after request (vLLM's prefix cache)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.testing.characters import OPENCODE_TOOLS
from proxy.testing.scripted_upstream import Reply
from tests.conftest import MODEL, ROOT, chat
from tests.secrets_corpus import SECRETS
from tests.test_dialects import MESSAGES_TOOLS, RESPONSES_TOOLS

GITHUB = next(values[0] for kind, _, _, values in SECRETS if kind == "GitHub token")
PEM = next(text for kind, _, text, _ in SECRETS if kind == "private key (PEM/OpenSSH)")
PEM_LINE = next(values[0] for kind, _, _, values in SECRETS if kind == "private key (PEM/OpenSSH)")
FILE = f"# deploy settings\nregion = eu-west-1\ngithub_token: {GITHUB}\n"
READ = ("read", {"filePath": "deploy/settings.yaml"})
OBSERVE_POLICY = ROOT / "policies" / "observe.yaml"


def _chat_follow(first: dict[str, Any], reply: dict[str, Any], result: str) -> dict[str, Any]:
    message = reply["choices"][0]["message"]
    call = message["tool_calls"][0]
    return {**first, "messages": [*first["messages"], message,
                                  {"role": "tool", "tool_call_id": call["id"], "content": result}]}


def _responses_first() -> dict[str, Any]:
    return {"model": MODEL, "input": [{"type": "message", "role": "user", "content": "deploy it"}],
            "tools": RESPONSES_TOOLS}


def _responses_follow(first: dict[str, Any], reply: dict[str, Any], result: str) -> dict[str, Any]:
    call = next(item for item in reply["output"] if item["type"] == "function_call")
    return {**first, "input": [*first["input"], *reply["output"],
                               {"type": "function_call_output", "call_id": call["call_id"], "output": result}]}


def _messages_first() -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 1024, "messages": [{"role": "user", "content": "deploy it"}],
            "tools": MESSAGES_TOOLS}


def _messages_follow(first: dict[str, Any], reply: dict[str, Any], result: str) -> dict[str, Any]:
    use = next(block for block in reply["content"] if block["type"] == "tool_use")
    # The result as a nested content list: the text block inside the tool_result is scanned too.
    return {**first, "messages": [*first["messages"], {"role": "assistant", "content": reply["content"]},
                                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"],
                                                                "content": [{"type": "text", "text": result}]}]}]}


ROUTES = {
    "chat": ("/v1/chat/completions", lambda: chat([{"role": "user", "content": "deploy it"}], tools=OPENCODE_TOOLS),
             _chat_follow),
    "responses": ("/v1/responses", _responses_first, _responses_follow),
    "messages": ("/v1/messages", _messages_first, _messages_follow),
}


def _metric(proxy, kind: str) -> float:
    """The counter's value (the registry is the process's: tests compare before and after)."""
    with proxy.client() as client:
        text = client.get("/metrics").text
    line = f'allowlist_proxy_secrets_redacted_total{{model_name="{MODEL}",type="{kind}"}} '
    return next((float(row[len(line):]) for row in text.splitlines() if row.startswith(line)), 0.0)


def _conversation(upstream, proxy, route: str, result: str, session: str = "ses_secrets"):
    """The model reads a file; the client answers with `result` as the tool's result. Returns the follow-up
    request as the client sent it."""
    path, first_body, follow = ROUTES[route]
    upstream.script(Reply(tool_calls=[READ]), Reply(content="done"))
    with proxy.client() as client:
        first = first_body()
        reply = client.post(path, json=first, headers={"x-session-id": session})
        assert reply.status_code == 200, reply.text
        body = follow(first, reply.json(), result)
        sent = json.dumps(body)
        answer = client.post(path, content=sent, headers={"x-session-id": session, "content-type": "application/json"})
        assert answer.status_code == 200, answer.text
    assert json.loads(sent) == body  # the client's own copy: untouched
    return body


@pytest.mark.each_database
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_secret_in_a_tool_result_goes_upstream_redacted_and_is_counted(upstream, proxy, route, tmp_path):
    before = _metric(proxy, "github-pat")
    body = _conversation(upstream, proxy, route, FILE)
    assert GITHUB in json.dumps(body)
    raw = upstream.raw_requests[-1]
    assert GITHUB.encode() not in raw
    assert b"[redacted: github-pat]" in raw
    assert b"github_token: [redacted: github-pat]" in raw  # what surrounds the secret stays
    rows = proxy.rows("SELECT session_id, request_id, call_id, type, count, model FROM secret_redactions")
    assert [(r["session_id"], r["type"], r["count"], r["model"]) for r in rows] == [
        ("ses_secrets", "github-pat", 1, MODEL)]
    assert rows[0]["call_id"]
    with proxy.client() as client:
        stats = client.get("/stats/models").json()
        page = client.get("/dashboard/sessions/ses_secrets")
        session = client.get("/stats/sessions/ses_secrets").json()
        metrics = client.get("/metrics").text
    entry = next(m for m in stats["models"] if m["model"] == MODEL)
    assert entry["secrets_redacted"] == {"github-pat": 1}
    assert page.status_code == 200
    assert [(r["type"], r["count"]) for r in session["secrets_redacted"]] == [("github-pat", 1)]
    assert GITHUB not in json.dumps(session)
    assert _metric(proxy, "github-pat") == before + 1
    assert GITHUB not in metrics


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_redacted_conversation_repeats_the_same_bytes(upstream, proxy, route):
    """Two requests of one growing conversation: the second starts with the first's redacted turns, byte for
    byte, and the secret is counted once per tool call in the store."""
    path = ROUTES[route][0]
    before = _metric(proxy, "private-key")
    body = _conversation(upstream, proxy, route, PEM)
    first_sent = upstream.raw_requests[-1]
    assert PEM_LINE.encode() not in first_sent and b"[redacted: private-key]" in first_sent
    key = "input" if route == "responses" else "messages"
    grown = {**body, key: [*body[key], *([{"role": "assistant", "content": "done"}] if route != "responses" else
                                         [{"type": "message", "role": "assistant", "content": "done"}]),
                           *([{"role": "user", "content": "and now?"}] if route != "responses" else
                             [{"type": "message", "role": "user", "content": "and now?"}])]}
    upstream.script(Reply(content="ok"))
    with proxy.client() as client:
        answer = client.post(path, content=json.dumps(grown),
                             headers={"x-session-id": "ses_secrets", "content-type": "application/json"})
        assert answer.status_code == 200, answer.text
    second_sent = upstream.raw_requests[-1]
    turns_first = json.loads(first_sent)[key]
    turns_second = json.loads(second_sent)[key]
    assert turns_second[:len(turns_first)] == turns_first
    # Byte for byte: the redacted turn is encoded the same way in both requests.
    redacted_turn = next(json.dumps(t, ensure_ascii=False) for t in turns_first if "[redacted: " in json.dumps(t))
    assert redacted_turn.encode() in first_sent and redacted_turn.encode() in second_sent
    cut = first_sent.index(redacted_turn.encode()) + len(redacted_turn)
    assert second_sent[:cut] == first_sent[:cut]
    rows = proxy.rows("SELECT type, count FROM secret_redactions")
    assert [tuple(r) for r in rows] == [("private-key", 1)]
    assert _metric(proxy, "private-key") == before + 2  # each request sent upstream redacted counts


def test_nothing_stores_or_logs_the_secret(upstream, start_proxy, tmp_path, capfd):
    db = tmp_path / "store.db"
    proxy = start_proxy(upstream.url, db=f"sqlite:///{db}")
    _conversation(upstream, proxy, "chat", FILE)
    proxy.rows("SELECT 1")
    data = b"".join(p.read_bytes() for p in tmp_path.glob("store.db*"))
    assert b"github-pat" in data
    assert GITHUB.encode() not in data and GITHUB[4:20].encode() not in data
    out, err = capfd.readouterr()
    assert GITHUB not in out + err


def test_observe_mode_counts_and_changes_nothing(upstream, start_proxy):
    proxy = start_proxy(upstream.url, policy=OBSERVE_POLICY)
    body = _conversation(upstream, proxy, "chat", FILE)
    assert GITHUB.encode() in upstream.raw_requests[-1]
    assert json.loads(upstream.raw_requests[-1])["messages"] == body["messages"]
    rows = proxy.rows("SELECT type, count FROM secret_redactions")
    assert [tuple(r) for r in rows] == [("github-pat", 1)]


def test_redaction_off_sends_the_secret(upstream, start_proxy, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text((ROOT / "policies" / "strict.yaml").read_text().replace(
        "  redact: true ", "  redact: false"))
    proxy = start_proxy(upstream.url, policy=policy)
    _conversation(upstream, proxy, "chat", FILE)
    assert GITHUB.encode() in upstream.raw_requests[-1]


def test_a_request_without_secrets_goes_upstream_byte_for_byte(upstream, proxy):
    path, first_body, follow = ROUTES["chat"]
    upstream.script(Reply(tool_calls=[READ]), Reply(content="done"))
    with proxy.client() as client:
        first = first_body()
        reply = client.post(path, json=first)
        assert reply.status_code == 200, reply.text
        sent = json.dumps(follow(first, reply.json(), "region = eu-west-1\ntoken = self.session.token\n"),
                          separators=(",", ":"))
        client.post(path, content=sent, headers={"content-type": "application/json"})
    upstream_body = upstream.raw_requests[-1]
    assert upstream_body.startswith(sent[:sent.index('"messages"')].encode()) or b'"messages":[' in upstream_body
    assert sent[sent.index('"messages"'):sent.index("]") + 1].encode() in upstream_body


def test_the_users_own_words_pass_and_an_inlined_file_is_redacted(upstream, proxy):
    typed = f"use this token for the deploy: {GITHUB}"
    inlined = f"here is the file:\n```yaml\n{FILE}```\nplease check it"
    upstream.script(Reply(content="ok"), Reply(content="ok"))
    with proxy.client() as client:
        client.post("/v1/chat/completions", json=chat([{"role": "user", "content": typed}]))
        assert GITHUB.encode() in upstream.raw_requests[-1]
        client.post("/v1/chat/completions", json=chat([{"role": "user", "content": inlined}]))
    sent = json.loads(upstream.raw_requests[-1])["messages"][-1]["content"]
    assert GITHUB not in sent and "[redacted: github-pat]" in sent and sent.startswith("here is the file:")


def _tool_turns(*results: str) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [{"role": "user", "content": "deploy it"}]
    for n, result in enumerate(results):
        turns += [{"role": "assistant", "content": "", "tool_calls": [
                      {"id": f"c{n}", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": f"c{n}", "content": result}]
    return turns


def test_a_text_sent_again_is_scanned_once_and_redacted_the_same(monkeypatch):
    from proxy.enforce import secrets
    from proxy.policy.schema import Policy

    scanned: list[list[str]] = []
    real = secrets.redact_texts

    def counting(texts, *args):
        scanned.append(list(texts))
        return real(texts, *args)

    monkeypatch.setattr(secrets, "redact_texts", counting)
    secrets.forget_texts()
    policy = Policy.model_validate({"name": "t"})
    plain = "def f(x):\n    return x\n" * 40

    def send(turns: list[dict[str, Any]], on: Policy = policy) -> bytes:
        body = json.dumps({"model": MODEL, "messages": turns}).encode()
        return secrets.redact_request(body, turns, "chat", on)[0]

    first = send(_tool_turns(FILE, plain))
    assert scanned == [[FILE, plain]] and GITHUB.encode() not in first
    # The next turn sends both again with one more result: only the new one is read.
    second = send(_tool_turns(FILE, plain, "done"))
    assert scanned[1:] == [["done"]]
    assert second.startswith(first[:first.index(b'"c1"')])  # the same bytes up to the new turn
    # What a process that had seen nothing would send: the same bytes.
    secrets.forget_texts()
    assert send(_tool_turns(FILE, plain, "done")) == second
    # Another policy's allow patterns are another reading of the same text.
    allowing = Policy.model_validate({"name": "t", "secrets": {"allow": [GITHUB[:12]]}})
    assert GITHUB.encode() in send(_tool_turns(FILE, plain), allowing)


def test_what_is_kept_of_texts_read_is_bounded(monkeypatch):
    from proxy.enforce import secrets
    from proxy.policy.schema import Policy

    secrets.forget_texts()
    monkeypatch.setattr(secrets, "_SEEN_TEXTS", 10)
    monkeypatch.setattr(secrets, "_KEPT_REDACTED_CHARS", 3 * len(FILE) + 10)
    policy = Policy.model_validate({"name": "t"})
    for n in range(40):
        turns = _tool_turns(f"{FILE}# {n}\n", f"plain {n}")
        secrets.redact_request(json.dumps({"messages": turns}).encode(), turns, "chat", policy)
        assert len(secrets._seen) <= 10 and secrets._kept_chars <= 3 * len(FILE) + 10
    assert secrets._kept_chars == sum(len(r.text) for r in secrets._seen.values() if r is not None)
    secrets.forget_texts()
