"""Sessions equal conversations, with and without headers, through the real proxy: each simulated client keeps
exactly what it received (streamed, every route) and sends it back, as the real clients do."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from proxy.testing.characters import OPENCODE_TOOLS
from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from proxy.testing.server import ServerThread
from tests.conftest import MODEL
from tests.stats.seed_data import SEED

ALLOWED = 'uv run scripts/search.py "rust async"'
PIPED = ALLOWED + " | head -5"
SYSTEM = "You are a coding agent."
TASK = "find rust async docs"  # every run of the scripted task starts alike
CHAT_TOOLS = OPENCODE_TOOLS
RESPONSES_TOOLS = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
                   for t in OPENCODE_TOOLS]
MESSAGES_TOOLS = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in OPENCODE_TOOLS]
SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])


def agent(body: dict[str, Any]) -> Reply:
    """The model of every run: its first streamed turn is rejected, the retry allowed, then one more call and
    an answer; what it says depends on the conversation only, so identical runs get identical turns."""
    last = body["messages"][-1]
    said = str(last.get("content") or "")
    if last["role"] == "tool" and "Rejected" in said:
        return Reply(content="I will run a tool.", tool_calls=[("bash", {"command": ALLOWED})])
    if last["role"] == "tool" and said.endswith("result 1"):
        return Reply(content="Once more.", tool_calls=[("bash", {"command": ALLOWED})])
    if last["role"] == "tool":
        return Reply(content="Done.")
    return Reply(content="I will run a tool.", tool_calls=[("bash", {"command": PIPED})])


def _events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in raw.decode().split("\n\n"):
        lines = block.splitlines()
        data = "\n".join(line[6:] for line in lines if line.startswith("data: "))
        if data and data != "[DONE]":
            name = next((line[7:] for line in lines if line.startswith("event: ")), "")
            out.append((name, json.loads(data)))
    return out


class Conversation:
    """One run of a client on one route: the history it holds, built only from what it received."""

    def __init__(self, route: str, *, headers: dict[str, str] | None = None, chained: bool = False) -> None:
        self.route, self.headers, self.chained = route, headers or {}, chained
        self.turns = 0
        self.previous: str | None = None
        self.pending: list[dict[str, Any]] = []  # new input items of a previous_response_id chain
        self.raw: list[bytes] = []
        if route == "chat":
            self.history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                                  {"role": "user", "content": TASK}]
        elif route == "responses":
            self.history = [{"type": "message", "role": "user", "content": TASK}]
            self.pending = list(self.history)
        else:
            self.history = [{"role": "user", "content": TASK}]

    @property
    def finished(self) -> bool:
        return self.turns >= 3

    def step(self, client: Any) -> None:
        """One request, streamed; the answer is kept as the client keeps it, and the tool results appended."""
        if self.route == "chat":
            body = {"model": MODEL, "messages": self.history, "tools": CHAT_TOOLS, "stream": True}
            raw = client.post("/v1/chat/completions", json=body, headers=self.headers).content
            calls = self._chat(raw)
        elif self.route == "responses":
            body = {"model": MODEL, "instructions": SYSTEM, "tools": RESPONSES_TOOLS, "stream": True,
                    "input": self.pending if self.chained and self.previous else self.history}
            if self.chained and self.previous:
                body["previous_response_id"] = self.previous
            raw = client.post("/v1/responses", json=body, headers=self.headers).content
            calls = self._responses(raw)
        else:
            body = {"model": MODEL, "max_tokens": 1024, "system": SYSTEM, "messages": self.history,
                    "tools": MESSAGES_TOOLS, "stream": True}
            raw = client.post("/v1/messages", json=body, headers=self.headers).content
            calls = self._messages(raw)
        self.raw.append(raw)
        self.turns += 1
        self._results(calls)

    def _chat(self, raw: bytes) -> list[str]:
        content, calls = "", {}
        for _, chunk in _events(raw):
            for choice in chunk.get("choices") or []:
                delta = choice["delta"]
                content += delta.get("content") or ""
                for call in delta.get("tool_calls") or []:
                    calls.setdefault(call["index"], {"id": call["id"], "type": "function",
                                                     "function": {"name": call["function"]["name"], "arguments": ""}})
                    calls[call["index"]]["function"]["arguments"] += call["function"].get("arguments") or ""
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [calls[k] for k in sorted(calls)]
        self.history.append(message)
        return [c["id"] for c in message.get("tool_calls", [])]

    def _responses(self, raw: bytes) -> list[str]:
        events = _events(raw)
        completed = [d for n, d in events if n == "response.completed"][-1]["response"]
        self.previous = completed["id"]
        items = [d["item"] for n, d in events if n == "response.output_item.done"]
        kept = [i for i in items if i["type"] in ("message", "function_call")]
        self.history += kept
        self.pending = []
        return [i["call_id"] for i in kept if i["type"] == "function_call"]

    def _messages(self, raw: bytes) -> list[str]:
        blocks: dict[int, dict[str, Any]] = {}
        for name, data in _events(raw):
            if name == "content_block_start":
                blocks[data["index"]] = {**data["content_block"], "json": ""}
            elif name == "content_block_delta":
                delta, block = data["delta"], blocks[data["index"]]
                if delta["type"] == "text_delta":
                    block["text"] += delta["text"]
                elif delta["type"] == "input_json_delta":
                    block["json"] += delta["partial_json"]
        content = []
        for k in sorted(blocks):
            block = blocks[k]
            if block["type"] == "tool_use":
                content.append({"type": "tool_use", "id": block["id"], "name": block["name"],
                                "input": json.loads(block.pop("json") or "{}")})
            else:
                block.pop("json")
                content.append(block)
        self.history.append({"role": "assistant", "content": content})
        return [b["id"] for b in content if b["type"] == "tool_use"]

    def _results(self, call_ids: list[str]) -> None:
        if not call_ids:
            return
        result = f"result {self.turns}"
        if self.route == "chat":
            self.history += [{"role": "tool", "tool_call_id": c, "content": result} for c in call_ids]
        elif self.route == "responses":
            outputs = [{"type": "function_call_output", "call_id": c, "output": result} for c in call_ids]
            self.history += outputs
            self.pending += outputs
        else:
            self.history.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c, "content": result} for c in call_ids]})


def run_interleaved(proxy: Any, conversations: list[Conversation]) -> None:
    with proxy.client() as client:
        while not all(c.finished for c in conversations):
            for conversation in conversations:
                if not conversation.finished:
                    conversation.step(client)


def session_sizes(proxy: Any) -> list[int]:
    rows = proxy.rows("SELECT session_id, count(*) FROM requests GROUP BY session_id")
    return sorted((r[1] for r in rows), reverse=True)


@SQLITE_ONLY
@pytest.mark.parametrize("named", [False, True])
@pytest.mark.parametrize("route", ["chat", "responses", "messages"])
def test_a_rejection_in_the_first_streamed_turn_keeps_one_session(upstream, proxy, route, named):
    """Three conversations whose first streamed turn had a rejection: three sessions, with and without a header;
    the client never got the narration twice (the retry repeats it), and got the line that says what was
    refused."""
    upstream.responder = agent
    conversations = [Conversation(route, headers={"x-session-id": f"ses_{k}"} if named else None) for k in range(3)]
    for conversation in conversations:
        run_interleaved(proxy, [conversation])
    assert session_sizes(proxy) == [3, 3, 3]
    said = {"chat": lambda h: h[2]["content"], "messages": lambda h: [b["text"] for b in h[1]["content"]
                                                                       if b["type"] == "text"],
            "responses": lambda h: [i["content"][0]["text"] for i in h[1:] if i.get("type") == "message"][:2]}
    told = said[route](conversations[0].history)
    note = "\n\nallowlist-proxy refused in this turn: `uv run scripts/search.py \"rust async\" | head -5` (pipe)."
    assert told in ("I will run a tool." + note, ["I will run a tool.", note])


@SQLITE_ONLY
@pytest.mark.parametrize("route", ["chat", "responses", "messages"])
def test_identical_runs_interleaved_turn_by_turn_are_five_sessions(upstream, proxy, route):
    upstream.responder = agent
    run_interleaved(proxy, [Conversation(route) for _ in range(5)])
    assert session_sizes(proxy) == [3] * 5
    with proxy.client() as client:
        (entry,) = client.get("/stats/models").json()["models"]
    # Each run erred once and recovered: no loop, full recovery (one loop of five attempts before).
    assert (entry["sessions"], entry["tool_calls"], entry["errors"]) == (5, 15, 5)
    assert entry["loops"]["count"] == 0 and entry["recovery_rate"] == 1.0


@SQLITE_ONLY
def test_identical_text_only_runs_interleaved_are_five_sessions(upstream, proxy):
    """Turns without calls carry no id: identical runs share every digest, and each continuation takes a session
    still waiting at that turn."""
    upstream.responder = lambda body: Reply(content=f"Answer {len(body['messages'])}.")
    histories = [[{"role": "user", "content": "hi"}] for _ in range(5)]
    with proxy.client() as client:
        for turn in range(3):
            for history in histories:
                answer = client.post("/v1/chat/completions", json={"model": MODEL, "messages": history}).json()
                history += [answer["choices"][0]["message"], {"role": "user", "content": f"more {turn}"}]
    assert session_sizes(proxy) == [3] * 5


@SQLITE_ONLY
def test_previous_response_id_chains_are_one_session_each(upstream, proxy):
    upstream.responder = agent
    run_interleaved(proxy, [Conversation("responses", chained=True) for _ in range(5)])
    assert session_sizes(proxy) == [3] * 5


@SQLITE_ONLY
@pytest.mark.parametrize("headers", [{"session_id": "old-codex"}, {"session-id": "codex"}])
def test_codex_session_headers_old_and_new(upstream, proxy, headers):
    upstream.responder = agent
    run_interleaved(proxy, [Conversation("responses", headers=headers)])
    assert [r[0] for r in proxy.rows("SELECT DISTINCT session_id FROM requests")] == list(headers.values())


@SQLITE_ONLY
@pytest.mark.parametrize("user_id", [
    "user_" + "a" * 64 + "_account__session_57a121ec-f78c-48c3-a745-e3036a3ecc33",
    json.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": "57a121ec-f78c-48c3-a745-e3036a3ecc33"}),
])
def test_claude_codes_metadata_user_id_names_the_session(upstream, proxy, user_id):
    upstream.script(Reply(content="hello"))
    with proxy.client() as client:
        client.post("/v1/messages", json={"model": MODEL, "max_tokens": 10, "metadata": {"user_id": user_id},
                                          "messages": [{"role": "user", "content": "hi"}]})
    assert proxy.rows("SELECT session_id FROM requests")[0][0] == "57a121ec-f78c-48c3-a745-e3036a3ecc33"
    assert proxy.rows("SELECT source FROM sessions")[0][0] == "metadata"


@pytest.mark.parametrize("rewrites", [False, True])
def test_interleaved_identical_runs_continue_across_replicas(upstream, start_proxy, rewrites):
    """Replicas on one database continue each other's sessions, identical runs included, and runs of a client
    that rewrites its conversation (the delivered call ids it names, `RewritingRun`)."""
    first = start_proxy(upstream.url)
    second = start_proxy(upstream.url, db=first.db_url)
    upstream.responder = rewriting_agent if rewrites else agent
    runs: list[Any] = [RewritingRun(True) if rewrites else Conversation("chat") for _ in range(3)]
    with first.client() as a, second.client() as b:
        for turn in range(3):
            for k, run in enumerate(runs):
                run.step((a, b)[(turn + k) % 2])
                (first, second)[(turn + k) % 2].flush()
    assert session_sizes(first) == [3, 3, 3]


# ---------------------------------------------------------------- the seed's traffic, without a header


@pytest.fixture
def seed_upstream():
    scripted = ScriptedUpstream(models=[model for model, *_ in SEED])
    with ServerThread(scripted.app) as server:
        scripted.url = server.url + "/v1"
        yield scripted


@SQLITE_ONLY
def test_the_seeds_traffic_without_headers_gives_the_seeds_table(seed_upstream, start_proxy):
    """Every seed session replayed as a streamed chat conversation of one scripted task (all runs of a model
    start alike), interleaved run by run, the errors in the first streamed turn and retried by the proxy: the
    table is the seed's, sessions included."""
    kinds = [PIPED, "timeout 30 uv run scripts/search.py", "cd src && uv run scripts/search.py", None]
    plans: list[tuple[str, list[list[Any]]]] = []
    for model, n_sessions, n_calls, n_errors in SEED:
        per_session = [n_calls // n_sessions + (i < n_calls % n_sessions) for i in range(n_sessions)]
        runs, errors = [], 0
        for n in per_session:
            turns: list[list[Any]] = [[ALLOWED] for _ in range(n)]
            if errors < n_errors and n > 1:  # the first turn: an error, then the allowed retry
                turns = [[kinds[errors % len(kinds)], ALLOWED], *turns[2:]]
                errors += 1
            runs.append(turns)
        plans.append((model, runs))

    current: list[Any] = []  # what the model says in the request being served (one at a time)

    def model_of(body: dict[str, Any]) -> Reply:
        if not current:
            return Reply(content="Finished.")
        command = current.pop(0)
        if command is None:
            return Reply(content="Running.", tool_calls=[("bash", '{"command": "uv run scri')])
        return Reply(content="Running.", tool_calls=[("bash", {"command": command})])

    seed_upstream.responder = model_of
    proxy = start_proxy(seed_upstream.url)
    with proxy.client() as client:
        for model, runs in plans:
            histories = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}] for _ in runs]
            for turn in range(max(len(r) for r in runs) + 1):
                for run, history in zip(runs, histories, strict=True):
                    if turn > len(run):
                        continue
                    current[:] = run[turn] if turn < len(run) else []
                    body = {"model": model, "messages": history, "tools": CHAT_TOOLS, "stream": True}
                    raw = client.post("/v1/chat/completions", json=body).content
                    probe = Conversation("chat")
                    probe.history = history
                    for call_id in probe._chat(raw):
                        history.append({"role": "tool", "tool_call_id": call_id, "content": "ok " + uuid.uuid4().hex})
        table = {m["model"]: (m["sessions"], m["tool_calls"], m["errors"], m["loops"]["count"], m["recovery_rate"])
                 for m in client.get("/stats/models").json()["models"]}
    assert table == {model: (n_sessions, n_calls, n_errors, 0, 1.0) for model, n_sessions, n_calls, n_errors in SEED}


def test_identical_text_only_runs_across_replicas(upstream, start_proxy):
    """Identical delivered turns, served by two replicas in turn: each continuation takes a session still waiting
    at its turn, whichever replica delivered it."""
    first = start_proxy(upstream.url)
    second = start_proxy(upstream.url, db=first.db_url)
    upstream.responder = lambda body: Reply(content=f"Answer {len(body['messages'])}.")
    histories = [[{"role": "user", "content": "hi"}] for _ in range(4)]
    with first.client() as a, second.client() as b:
        for turn in range(3):
            for k, history in enumerate(histories):
                replica = (turn + k) % 2
                answer = (a, b)[replica].post("/v1/chat/completions", json={"model": MODEL, "messages": history})
                (first, second)[replica].flush()
                history += [answer.json()["choices"][0]["message"], {"role": "user", "content": f"more {turn}"}]
    assert session_sizes(first) == [3] * 4


# ---------------------------------------------------------------- clients that rewrite their conversation


class RewritingRun:
    """A client that re-renders its memory at every step, as smolagents 1.26 does (`ActionStep.to_messages`, merged
    by `get_clean_message_list`): a delivered turn comes back as its text, stripped, then "\nCalling tools:\n[{'id':
    ...}]" in one assistant text, and its result as a user observation, so no request extends a turn the proxy
    delivered as the client got it."""

    def __init__(self, stream: bool) -> None:
        self.stream = stream
        self.memory: list[tuple[str, list[dict[str, Any]], str]] = []  # (text, calls, observation) per step
        self.turns = 0

    def messages(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
                                     {"role": "user", "content": [{"type": "text", "text": "New task:\n" + TASK}]}]
        for text, calls, observation in self.memory:
            shown = [{"id": c["id"], "type": "function",
                      "function": {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}}
                     for c in calls]
            rendered = f"{text.strip()}\nCalling tools:\n{shown!r}"
            out += [{"role": "assistant", "content": [{"type": "text", "text": rendered}]},
                    {"role": "user", "content": [{"type": "text", "text": f"Observation:\n{observation}"}]}]
        return out

    def step(self, client: Any) -> None:
        body = {"model": MODEL, "messages": self.messages(), "tools": CHAT_TOOLS, "stream": self.stream,
                "tool_choice": "required"}
        raw = client.post("/v1/chat/completions", json=body).content
        if self.stream:
            probe = Conversation("chat")
            probe._chat(raw)
            message = probe.history[-1]
        else:
            message = json.loads(raw)["choices"][0]["message"]
        self.turns += 1
        self.memory.append((message.get("content") or "", message.get("tool_calls") or [], f"result {self.turns}"))

    @property
    def finished(self) -> bool:
        return self.turns >= 3


def rewriting_agent(body: dict[str, Any]) -> Reply:
    """Every run: a rejected first call (retried by the proxy), then an allowed one, then two more steps."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(content="", tool_calls=[("bash", {"command": ALLOWED})])
    observed = sum("Observation:" in json.dumps(m.get("content")) for m in body["messages"])
    return Reply(content="", tool_calls=[("bash", {"command": PIPED if observed == 0 else ALLOWED})])


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [False, True])
def test_runs_that_rewrite_their_conversation_are_one_session_each(upstream, proxy, stream):
    upstream.responder = rewriting_agent
    runs = [RewritingRun(stream) for _ in range(5)]
    with proxy.client() as client:
        while not all(run.finished for run in runs):
            for run in runs:
                run.step(client)
    assert session_sizes(proxy) == [3] * 5
    with proxy.client() as client:
        (entry,) = client.get("/stats/models").json()["models"]
    assert (entry["sessions"], entry["errors"], entry["loops"]["count"], entry["recovery_rate"]) == (5, 5, 0, 1.0)


@SQLITE_ONLY
def test_a_call_id_a_client_made_itself_links_nothing(upstream, proxy):
    """smolagents' CodeAgent numbers its own calls `call_1`, `call_2` in every run: such ids name no delivered
    call, so runs that write them stay sessions of their own."""
    upstream.responder = lambda body: Reply(content="Thought: done.")
    with proxy.client() as client:
        for _ in range(3):
            messages = [{"role": "user", "content": "New task:\n" + TASK},
                        {"role": "assistant", "content": "Calling tools:\n[{'id': 'call_1', 'type': 'function'}]"},
                        {"role": "user", "content": "Observation:\nok"}]
            client.post("/v1/chat/completions", json={"model": MODEL, "messages": messages})
    assert session_sizes(proxy) == [1, 1, 1]


# ---------------------------------------------------------------- sessions from structure only (issue 37)


class AgnoRun:
    """A client that sends back every delivered turn but rewrites the call ids it was given, as Agno 3.1 does for an
    OpenAI-compatible model (agno/utils/message.py `reformat_tool_call_ids`, provider `openai_chat`: an id without
    the `call_` prefix, or longer than 40, becomes `call_` and a counter in hex filling 40 characters, numbered in
    the order the request's assistant turns name them; each tool result follows its call's new id)."""

    def __init__(self, stream: bool) -> None:
        self.stream = stream
        self.history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
        self.turns = 0

    def messages(self) -> list[dict[str, Any]]:
        renamed: dict[str, str] = {}
        for message in self.history:
            for call in message.get("tool_calls") or []:
                old = call["id"]
                if (not old.startswith("call_") or len(old) > 40) and old not in renamed:
                    renamed[old] = f"call_{len(renamed):035x}"
        out = []
        for message in self.history:
            message = json.loads(json.dumps(message))
            for call in message.get("tool_calls") or []:
                call["id"] = renamed.get(call["id"], call["id"])
            if "tool_call_id" in message:
                message["tool_call_id"] = renamed.get(message["tool_call_id"], message["tool_call_id"])
            out.append(message)
        return out

    def step(self, client: Any) -> None:
        body = {"model": MODEL, "messages": self.messages(), "tools": CHAT_TOOLS, "stream": self.stream}
        raw = client.post("/v1/chat/completions", json=body).content
        probe = Conversation("chat")
        if self.stream:
            probe._chat(raw)
            message = probe.history[-1]
        else:
            message = json.loads(raw)["choices"][0]["message"]
            message = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
        self.history.append(message)
        self.turns += 1
        for call in message.get("tool_calls") or []:
            self.history.append({"role": "tool", "tool_call_id": call["id"], "content": f"result {self.turns}"})

    @property
    def finished(self) -> bool:
        return self.turns >= 3


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_rewrites_its_call_ids_keeps_one_session(upstream, proxy, stream):
    """Agno-style runs, interleaved and identical: the ids the proxy delivered never come back, so each step
    continues by the lineage of what the client sent back (its turns' text, names and arguments)."""
    upstream.responder = agent
    runs = [AgnoRun(stream) for _ in range(4)]
    with proxy.client() as client:
        while not all(run.finished for run in runs):
            for run in runs:
                if not run.finished:
                    run.step(client)
    sent = [m for run in runs for m in run.messages() for m in [m] if m.get("tool_calls")]
    assert sent and all(c["id"].startswith("call_0000") for m in sent for c in m["tool_calls"])
    assert session_sizes(proxy) == [3] * 4


def _narrating(body: dict[str, Any]) -> Reply:
    """The model of the stranger's conversation: it writes a call id it saw elsewhere into its narration."""
    seen = body["messages"][1]["content"] if len(body["messages"]) > 1 else ""
    return Reply(content=f"Calling tools: [{{'id': '{seen}', 'type': 'function', 'function': {{'name': 'bash'}}}}]")


@SQLITE_ONLY
@pytest.mark.parametrize("route", ["chat", "messages"])
def test_a_call_id_in_narration_never_merges_sessions(upstream, proxy, route):
    """Conversation A is delivered a call; conversation B's model writes A's call id into its answer, and B's client
    sends it back: as it was (extending B's turn), re-rendered (extending nothing), or alone in a conversation of
    its own. B's requests are never filed under A, whose session holds its own request only."""
    upstream.script(Reply(tool_calls=[("bash", {"command": ALLOWED})]))
    with proxy.client() as client:
        if route == "chat":
            first = client.post("/v1/chat/completions", json={"model": MODEL, "tools": CHAT_TOOLS, "messages": [
                {"role": "system", "content": SYSTEM}, {"role": "user", "content": "task A"}]}).json()
            stolen = first["choices"][0]["message"]["tool_calls"][0]["id"]
        else:
            first = client.post("/v1/messages", json={"model": MODEL, "max_tokens": 64, "system": SYSTEM,
                                                      "tools": MESSAGES_TOOLS,
                                                      "messages": [{"role": "user", "content": "task A"}]}).json()
            stolen = next(b for b in first["content"] if b["type"] == "tool_use")["id"]
        narration = (f"Calling tools: [{{'id': '{stolen}', 'type': 'function', 'function': {{'name': 'bash', "
                     f"'arguments': {{'command': '{ALLOWED}'}}}}}}]")
        upstream.script(*[Reply(content=narration)] * 4)
        if route == "chat":
            def post(messages: list[dict[str, Any]]) -> None:
                client.post("/v1/chat/completions", json={"model": MODEL, "tools": CHAT_TOOLS, "messages": [
                    {"role": "system", "content": SYSTEM}, *messages]})
        else:
            def post(messages: list[dict[str, Any]]) -> None:
                client.post("/v1/messages", json={"model": MODEL, "max_tokens": 64, "system": SYSTEM,
                                                  "tools": MESSAGES_TOOLS, "messages": messages})
        post([{"role": "user", "content": "task B"}])
        said = {"role": "assistant", "content": narration}
        post([{"role": "user", "content": "task B"}, said, {"role": "user", "content": "go on"}])
        post([{"role": "user", "content": "task B"}, {**said, "content": "Note.\n" + narration},
              {"role": "user", "content": "go on"}])
        post([{"role": "user", "content": "task C"}, said, {"role": "user", "content": "go on"}])
    rows = proxy.rows("SELECT session_id FROM requests ORDER BY started_at")
    sessions = [r[0] for r in rows]
    assert sessions[0] not in sessions[1:], sessions
    assert sessions[1] == sessions[2]  # B, continued as the client received it


def test_a_namespace_keeps_its_sessions_apart():
    """A project key's namespace (the hook proxy/sessions/resolve.py documents): the same conversation, header or
    lineage, is one session per namespace, never another's, and none of a request without a key."""
    from proxy.sessions.resolve import SessionResolver

    resolver = SessionResolver()
    conversation = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    reply = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "chatcmpl-tool-0123456789abcdef0123456789abcdef", "type": "function",
         "function": {"name": "bash", "arguments": json.dumps({"command": ALLOWED})}}]}
    follow = [*conversation, reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "ok"}]
    first = resolver.resolve({}, conversation, namespace="key_a")
    resolver.remember(first, None, reply)
    assert resolver.resolve({}, follow, namespace="key_a").id == first.id
    assert resolver.resolve({}, follow, namespace="key_b").is_new
    assert resolver.resolve({}, follow).is_new
    rewritten = json.loads(json.dumps(follow).replace("chatcmpl-tool-", "call_0000000000000"))
    assert resolver.resolve({}, rewritten, namespace="key_a").id == first.id
    assert resolver.resolve({}, rewritten, namespace="key_b").is_new
    named = {"x-session-id": "ses_1"}
    assert resolver.resolve(named, conversation).id == "ses_1"
    assert resolver.resolve(named, conversation, namespace="key_a").id == "key_a:ses_1"
    assert resolver.resolve(named, conversation, namespace="k" * 64).id.endswith(":ses_1")
    assert len(resolver.resolve(named, conversation, namespace="k" * 64).id) == len("0123456789abcdef:ses_1")
