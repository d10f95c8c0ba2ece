"""`allowlist-proxy serve --workers N`: N processes on one port, one store, the state any of them needs in it.

Each proxy here is the real `serve` command in a process of its own (the parent and its spawned workers); the
scripted upstream runs in the test. Which worker answers a request is read from the workers' `request` log lines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from proxy.store.db import create_engine
from proxy.testing.demo_traffic import streamed_message
from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from proxy.testing.server import free_port
from tests.conftest import ROOT, STRICT_POLICY, wait_until
from tests.test_dialects import ALLOWED, PIPED, responses_body
from tests.test_response_chains import _send

MODEL = "qwen3.5-27b"
START_SECONDS = 120  # two interpreters importing the proxy on a loaded two-core machine


class ServeProcess:
    """`allowlist-proxy serve` as its own process; its JSON log lines in a file."""

    def __init__(self, tmp_path: Path, upstream_url: str, db_url: str, *, workers: int, policy: Path = STRICT_POLICY,
                 extra: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_path / f"serve-{self.port}.log"
        self.db_url = db_url
        self.workers = workers
        env = {**os.environ, "ALLOWLIST_PROXY_LOG_LEVEL": "info", "ALLOWLIST_PROXY_LOG_FORMAT": "json"}
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "proxy", "serve", "--port", str(self.port), "--upstream", upstream_url,
             "--db", db_url, "--policy", str(policy), "--workers", str(workers), *extra],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self._log)

    def health(self) -> dict[str, Any] | None:
        try:
            response = httpx.get(self.url + "/health", timeout=5)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None

    def wait_up(self) -> None:
        def up() -> bool:
            assert self.proc.poll() is None, f"serve exited with {self.proc.returncode}: {self.log_text()[-3000:]}"
            found = self.health()
            return found is not None and found.get("workers") == self.workers

        assert wait_until(up, timeout=START_SECONDS), self.log_text()[-3000:]

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        found = []
        for line in self.log_path.read_bytes().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and (name is None or event.get("event") == name):
                found.append(event)
        return found

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def worker_pids(self) -> dict[int, int]:
        """The pid each worker index runs as now (from their latest `proxy.started` line)."""
        pids: dict[int, int] = {}
        for event in self.events("proxy.started"):
            if "worker" in event:
                pids[int(event["worker"])] = int(event["pid"])
        return pids

    def client(self) -> httpx.Client:
        # A connection of its own each time: the kernel hands it to whichever worker accepts first.
        return httpx.Client(base_url=self.url, timeout=60)

    def post(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
        # A connection of its own each time: the kernel hands it to whichever worker accepts first.
        with httpx.Client(base_url=self.url, timeout=60) as client:
            return client.post(path, json=body, headers=headers or {})

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(90)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._log.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[ServeProcess] = []

    def _start(upstream_url: str, db_url: str, **kwargs: Any) -> ServeProcess:
        running = ServeProcess(tmp_path, upstream_url, db_url, **kwargs)
        started.append(running)
        running.wait_up()
        return running

    yield _start
    for running in started:
        running.kill()


# -- one scripted conversation stream, answered by one process and by two workers -----------------------------


def _reply(body: dict[str, Any]) -> Reply:
    """Deterministic: the answer names the last user turn; a turn asking for it calls a tool."""
    if "input" in body:  # Responses (not used by the responder: those are scripted)
        return Reply(content="Done.")
    last = next((m for m in reversed(body["messages"]) if m["role"] in ("user", "tool")), {})
    said = str(last.get("content"))
    if "use a tool" in said:
        return Reply(content=f"on it ({said[:20]})", tool_calls=[("bash", {"command": ALLOWED})])
    if "piped" in said:
        return Reply(content="", tool_calls=[("bash", {"command": PIPED})])
    return Reply(content=f"answer to: {said[:40]}")


def _chat(messages: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    from proxy.testing.characters import OPENCODE_TOOLS

    body: dict[str, Any] = {"model": MODEL, "messages": messages, "tools": OPENCODE_TOOLS, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def _assistant_turn(response: httpx.Response, stream: bool) -> dict[str, Any]:
    """The assistant message as the client rebuilds it from what it received."""
    assert response.status_code == 200, response.text
    if not stream:
        message = response.json()["choices"][0]["message"]
        turn = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            turn["tool_calls"] = message["tool_calls"]
        return turn
    message = streamed_message(response.text.split("\n"))
    turn = {"role": "assistant", "content": message["content"]}
    if message["tool_calls"]:
        turn["tool_calls"] = message["tool_calls"]
    return turn


def _bash(command: str) -> Reply:
    return Reply(content="", tool_calls=[("bash", {"command": command, "description": "search"})])


def _drive(proxy: ServeProcess, upstream: ScriptedUpstream) -> dict[str, Any]:
    """The same requests, one at a time, each on a new connection; what a client and the upstream saw."""
    upstream.responder = _reply
    conversations: dict[str, list[dict[str, Any]]] = {}
    plan = [("A", "start A", False), ("B", "start B", True), ("A", "use a tool", True), ("C", "start C", False),
            ("B", "go on B", False), ("A", "and then A", False), ("C", "use a tool C", True), ("B", "end B", True),
            ("C", "piped please", False), ("A", "finish A", True)]
    for name, said, stream in plan:
        messages = conversations.setdefault(name, [{"role": "system", "content": "You are a coder."}])
        last = messages[-1]
        if last.get("tool_calls"):
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": "results"} for c in last["tool_calls"]]
        messages.append({"role": "user", "content": f"{said} ({name})"})
        response = proxy.post("/v1/chat/completions", _chat(messages, stream))
        messages.append(_assistant_turn(response, stream))
    named = proxy.post("/v1/chat/completions", _chat([{"role": "user", "content": "named"}], False),
                       headers={"x-session-id": "ses_named"})
    assert named.status_code == 200
    # Responses: a retried streamed turn, then the next turn naming the id the client was given.
    upstream.store_responses = True
    upstream.script(_bash(PIPED), _bash(ALLOWED))
    client_id, output = _send(proxy, responses_body(stream=True))
    (call,) = [item for item in output if item["type"] == "function_call"]
    upstream.script(Reply(content="Done."))
    before = len(upstream.requests)
    _send(proxy, responses_body(stream=True, previous_response_id=client_id,
                                     input=[{"type": "function_call_output", "call_id": call["call_id"],
                                             "output": "results"}]))
    continued = upstream.requests[before]
    # A blocked whole turn, then its continuation.
    upstream.script(*[_bash(PIPED)] * 4)
    blocked_id, _ = _send(proxy, responses_body(stream=False, text="blocked one"))
    upstream.script(Reply(content="Fine."))
    before = len(upstream.requests)
    _send(proxy, responses_body(stream=False, previous_response_id=blocked_id, input="why?"))
    after_block = upstream.requests[before]
    upstream.store_responses = False
    return {"chain_named_client_id": continued.get("previous_response_id") == client_id,
            "chain_previous": continued.get("previous_response_id") is not None,
            "blocked_items": [m.get("content") for m in after_block.get("messages", [])
                              if m.get("role") == "assistant"][-1:],
            "requests": len(plan) + 1 + 4}


async def _recorded(db_url: str) -> dict[str, Any]:
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            sessions = [r[0] for r in await conn.execute(text(
                "SELECT session_id FROM requests ORDER BY started_at"))]
            routes = [r[0] for r in await conn.execute(text("SELECT route FROM requests ORDER BY started_at"))]
            calls = [tuple(r) for r in await conn.execute(text(
                "SELECT command, decision, delivered, attempt FROM tool_calls ORDER BY created_at, call_index"))]
            orphans = (await conn.execute(text(
                "SELECT count(*) FROM tool_calls t LEFT JOIN requests r ON r.id = t.request_id "
                "WHERE r.id IS NULL"))).scalar()
    finally:
        await engine.dispose()
    numbering: dict[str, int] = {}
    partition = [numbering.setdefault(s, len(numbering)) for s in sessions]
    return {"sessions": partition, "routes": routes, "calls": calls, "orphans": orphans}


def _figures(proxy: ServeProcess) -> dict[str, Any]:
    time.sleep(0.5)  # past store_flush_seconds: the rows nobody waited for (request ends) are committed by then
    with httpx.Client(base_url=proxy.url, timeout=60) as client:
        models = client.get("/stats/models").json()["models"]
        metrics = client.get("/metrics").text
    kept = ("model", "sessions", "requests", "tool_calls", "errors", "error_rate", "reasons", "loops")
    # /metrics says what every worker did, whichever answers it.
    counted = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                  if line.startswith("allowlist_proxy_requests_total{"))
    return {"models": [{k: m[k] for k in kept} for m in models], "requests_counted": counted}


def _crossings(proxy: ServeProcess) -> int:
    """How many times a session's next request was answered by another worker than its last."""
    last: dict[str, int] = {}
    crossed = 0
    for event in proxy.events("request"):
        session, worker = event.get("session"), event.get("worker")
        if session in last and last[session] != worker:
            crossed += 1
        last[session] = worker
    return crossed


@pytest.mark.each_database
def test_requests_spread_over_workers_give_what_one_process_gives(upstream, serve, db_url, tmp_path):
    import asyncio

    from tests.databases import database_url

    (tmp_path / "one").mkdir()
    with database_url("sqlite" if db_url.startswith("sqlite") else "postgres", tmp_path / "one") as single_db:
        single = serve(upstream.url, single_db, workers=1)
        expected = _drive(single, upstream)
        expected_figures = _figures(single)
        assert single.stop() == 0
        expected_rows = asyncio.run(_recorded(single_db))
    workers = serve(upstream.url, db_url, workers=2)
    got = _drive(workers, upstream)
    got_figures = _figures(workers)
    assert got == expected
    assert got["chain_previous"] and not got["chain_named_client_id"], "the server's id, not the client's, went up"
    assert got_figures == expected_figures
    assert workers.stop() == 0
    rows = asyncio.run(_recorded(db_url))
    assert rows == expected_rows
    assert rows["orphans"] == 0 and len(rows["sessions"]) == got["requests"]
    answered_by = {e.get("worker") for e in workers.events("request")}
    assert answered_by == {0, 1}, "both workers answered"
    assert _crossings(workers) > 0, "some session went on in the other worker"


# -- lifecycle ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_killed_worker_is_restarted_and_no_released_call_is_lost(upstream, serve, db_url):
    import asyncio
    import uuid

    upstream.responder = lambda _body: Reply(content="ok ", tool_calls=[
        ("bash", {"command": f'uv run scripts/search.py "{uuid.uuid4().hex}"'})], chunk_delay=0.002)
    proxy = serve(upstream.url, db_url, workers=2)
    received: set[str] = set()
    victim = proxy.worker_pids()[1]

    async def load() -> None:
        from proxy.testing.characters import OPENCODE_TOOLS

        async def session(i: int, client: httpx.AsyncClient) -> None:
            for turn in range(1000):
                body = _chat([{"role": "user", "content": f"s{i} t{turn}"}], stream=turn % 2 == 0)
                body["tools"] = OPENCODE_TOOLS
                try:
                    response = await client.post("/v1/chat/completions", json=body,
                                                 headers={"x-session-id": f"ses_k{i}", "connection": "close"})
                except httpx.HTTPError:
                    continue  # its worker was killed under it
                if response.status_code != 200:
                    continue
                turn_got = _assistant_turn(response, turn % 2 == 0)
                received.update(json.loads(c["function"]["arguments"])["command"]
                                for c in turn_got.get("tool_calls") or [])
                if stop.is_set():
                    return

        stop = asyncio.Event()
        async with httpx.AsyncClient(base_url=proxy.url, timeout=30) as client:
            tasks = [asyncio.create_task(session(i, client)) for i in range(6)]
            deadline = time.monotonic() + 60
            while len(received) < 20 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            os.kill(victim, signal.SIGKILL)
            killed_at = len(received)
            while len(received) < killed_at + 20 and time.monotonic() < deadline + 60:
                await asyncio.sleep(0.01)
            stop.set()
            await asyncio.gather(*tasks)

    asyncio.run(load())
    assert wait_until(lambda: proxy.worker_pids().get(1) not in (None, victim), timeout=START_SECONDS)
    assert wait_until(lambda: (proxy.health() or {}).get("workers") == 2, timeout=START_SECONDS)
    exited = proxy.events("proxy.worker_exited")
    assert exited and exited[0]["worker"] == 1 and exited[0]["exit_code"] == -signal.SIGKILL
    assert proxy.stop() == 0

    async def stored() -> dict[str, bool]:
        engine = create_engine(db_url)
        try:
            async with engine.connect() as conn:
                return {c: bool(d) for c, d in await conn.execute(text("SELECT command, delivered FROM tool_calls"))}
        finally:
            await engine.dispose()

    calls = asyncio.run(stored())
    missing = [c for c in received if not calls.get(c)]
    assert len(received) >= 20 and missing == []
    assert asyncio.run(_recorded(db_url))["orphans"] == 0


def _wide() -> str:
    """The strict policy in observe mode: a widening edit (held until SIGHUP)."""
    return STRICT_POLICY.read_text().replace("mode: enforce", "mode: observe", 1)


def _policies(proxy: ServeProcess, worker: int, tries: int = 60) -> dict[str, Any]:
    """GET /policies as worker `worker` answers it (new connections until that worker takes one)."""
    for _ in range(tries):
        with httpx.Client(base_url=proxy.url, timeout=30) as client:
            health = client.get("/health").json()
            if health.get("worker") == worker:
                return client.get("/policies").json()
    raise AssertionError(f"worker {worker} never answered")


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_held_edit_is_held_in_every_worker_and_sighup_applies_it_in_all(upstream, serve, db_url, tmp_path):
    policies = tmp_path / "policies"
    policies.mkdir()
    policy = policies / "strict.yaml"
    policy.write_text(STRICT_POLICY.read_text())
    proxy = serve(upstream.url, db_url, workers=2, policy=policy)
    served = _policies(proxy, 0)["active"]["hash"]
    policy.write_text(_wide())  # observe mode: a widening edit, held

    def held_everywhere() -> bool:
        return all(_policies(proxy, w)["held"] for w in (0, 1))

    assert wait_until(held_everywhere, timeout=30)
    assert {_policies(proxy, w)["active"]["hash"] for w in (0, 1)} == {served}
    # A worker started now (a crash, then its restart) serves what the others serve, not the file.
    victim = proxy.worker_pids()[1]
    os.kill(victim, signal.SIGKILL)
    assert wait_until(lambda: proxy.worker_pids().get(1) not in (None, victim), timeout=START_SECONDS)
    assert wait_until(lambda: (proxy.health() or {}).get("workers") == 2, timeout=START_SECONDS)
    assert _policies(proxy, 1)["active"]["hash"] == served and _policies(proxy, 1)["held"]
    # SIGHUP to the parent applies it in every worker.
    proxy.proc.send_signal(signal.SIGHUP)

    def applied_everywhere() -> bool:
        return all(_policies(proxy, w)["active"]["hash"] != served and not _policies(proxy, w)["held"]
                   for w in (0, 1))

    assert wait_until(applied_everywhere, timeout=30)
    # A narrowing edit applies at once, everywhere.
    policy.write_text(STRICT_POLICY.read_text())
    assert wait_until(lambda: {_policies(proxy, w)["active"]["hash"] for w in (0, 1)} == {served}, timeout=30)
    assert proxy.stop() == 0


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sigterm_drains_every_worker_then_the_parent_exits_0(upstream, serve, db_url):
    upstream.responder = lambda _body: Reply(content="slow " * 40, content_chunk=1, chunk_delay=0.02)
    proxy = serve(upstream.url, db_url, workers=2)
    pids = list(proxy.worker_pids().values())
    import threading

    got: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: got.append(proxy.post("/v1/chat/completions",
                                                                    _chat([{"role": "user", "content": "hi"}], True))))
    thread.start()
    assert wait_until(lambda: upstream.requests != [], timeout=30)
    assert proxy.stop(signal.SIGTERM) == 0
    thread.join(30)
    assert got and got[0].status_code == 200 and "[DONE]" in got[0].text, "the stream in flight was finished"
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert proxy.events("proxy.worker_exited") == []  # stopping is no crash: nothing was restarted


@pytest.mark.parametrize("backend", ["sqlite"])
def test_workers_whose_parent_is_killed_stop(upstream, serve, db_url):
    proxy = serve(upstream.url, db_url, workers=2)
    pids = list(proxy.worker_pids().values())
    assert len(pids) == 2
    proxy.proc.kill()  # SIGKILL: nothing would restart them or pass SIGHUP on
    proxy.proc.wait(30)

    def gone(pid: int) -> bool:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return True
        return "zombie" in status

    assert wait_until(lambda: all(gone(pid) for pid in pids), timeout=60)


# -- project keys: bound the same by every worker ----------------------------------------------------------------


async def _key_action(db_url: str, root: str | None = None, revoke: str | None = None) -> str:
    from proxy.keys.store import create_key, revoke_keys

    engine = create_engine(db_url)
    try:
        async with engine.begin() as conn:
            if revoke is not None:
                await revoke_keys(conn, revoke)
                return revoke
            assert root is not None
            key, _ = await create_key(conn, root=root, label="workers")
            return key
    finally:
        await engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_keyed_conversation_is_one_session_over_workers_and_a_revoked_key_is_refused_by_all(
        upstream, serve, db_url, tmp_path):
    import asyncio

    project = tmp_path / "project"
    project.mkdir()
    proxy = serve(upstream.url, db_url, workers=2, extra=("--key-cache-seconds", "0.2"))
    key = asyncio.run(_key_action(db_url, root=str(project)))
    auth = {"authorization": f"Bearer {key}"}
    upstream.responder = _reply
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coder."}]
    for turn, said in enumerate(("start", "use a tool", "go on", "use a tool again", "and then", "finish")):
        last = messages[-1]
        if last.get("tool_calls"):
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": "results"} for c in last["tool_calls"]]
        messages.append({"role": "user", "content": said})
        response = proxy.post("/v1/chat/completions", _chat(messages, turn % 2 == 1), headers=auth)
        messages.append(_assistant_turn(response, turn % 2 == 1))
    # The same conversation without the key is no part of the key's session.
    assert proxy.post("/v1/chat/completions", _chat(messages[:2], False)).status_code == 200
    asyncio.run(_key_action(db_url, revoke=key))
    time.sleep(0.5)  # past key_cache_seconds in every worker
    refused = [proxy.post("/v1/chat/completions", _chat(messages[:2], False), headers=auth).status_code
               for _ in range(8)]
    assert refused == [401] * 8
    assert proxy.stop() == 0
    rows = asyncio.run(_recorded(db_url))
    assert rows["sessions"] == [0] * 6 + [1], "one session for the keyed conversation, another without the key"
    assert _crossings(proxy) > 0, "the keyed session went on in the other worker"
