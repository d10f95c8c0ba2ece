"""Every answer reaches the user (DESIGN.md invariant 12): after a refusal, what the delivered attempt says reaches the
client on every route that re-asks, streamed and whole; text the client already has is not sent again; a turn
delivered after a refusal ends with one line that says what was refused; and the lineage records what the client
got, so its next request continues the session.

The model of each case narrates (`I will run a tool.`), proposes a piped command (refused), then answers in text
on the retry, as Qwen3-Coder does when it gives up after a refusal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from proxy.enforce.retry_text import continuation, line_break
from proxy.testing.characters import OPENCODE_TOOLS
from proxy.testing.scripted_upstream import Reply
from tests.conftest import MODEL
from tests.test_dialects import MESSAGES_TOOLS, RESPONSES_TOOLS, named_events

SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])
ROUTES = ["chat", "responses", "messages"]
CASES = [(route, stream) for route in ROUTES for stream in (False, True)]
ALLOWED = 'uv run scripts/search.py "rust async"'
PIPED = ALLOWED + " | head -5"
NARRATION = "I will run a tool."
ANSWER = "The notes mention tokio twice."
LINE = f"allowlist-proxy refused in this turn: `{PIPED}` (pipe)."
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
USER = "find rust async docs"


def first_request(route: str, stream: bool) -> dict[str, Any]:
    if route == "chat":
        return {"model": MODEL, "messages": [{"role": "user", "content": USER}], "tools": OPENCODE_TOOLS,
                "stream": stream}
    if route == "responses":
        return {"model": MODEL, "input": [{"type": "message", "role": "user", "content": USER}],
                "tools": RESPONSES_TOOLS, "stream": stream}
    return {"model": MODEL, "max_tokens": 1024, "messages": [{"role": "user", "content": USER}],
            "tools": MESSAGES_TOOLS, "stream": stream}


@dataclass
class Turn:
    """What the client holds of one answer, read the way the route's clients read it (a stream checked whole)."""

    texts: list[str] = field(default_factory=list)  # the answer text, per item or block (chat: one)
    reasoning: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)  # {"id", "name", "arguments" (parsed)}
    finish: str = ""
    items: list[dict[str, Any]] = field(default_factory=list)  # the turn as the client sends it back

    @property
    def text(self) -> str:
        return "".join(self.texts)


def read_turn(route: str, raw: bytes, stream: bool) -> Turn:
    return {"chat": _chat_turn, "responses": _responses_turn, "messages": _messages_turn}[route](raw, stream)


def _chat_turn(raw: bytes, stream: bool) -> Turn:
    if not stream:
        choice = json.loads(raw)["choices"][0]
        message = choice["message"]
        calls = message.get("tool_calls") or []
        reasoning = message.get("reasoning") or ""
        finish = choice["finish_reason"]
    else:
        chunks = [json.loads(block[6:]) for block in raw.decode().split("\n\n")
                  if block.startswith("data: ") and block != "data: [DONE]"]
        assert raw.endswith(b"data: [DONE]\n\n") and len({c["id"] for c in chunks}) == 1  # one stream, one id
        message = {"role": "assistant", "content": ""}
        reasoning, finish, by_index = "", "", {}
        for chunk in chunks:
            for choice in chunk["choices"]:
                delta = choice["delta"]
                message["content"] += delta.get("content") or ""
                reasoning += delta.get("reasoning") or ""
                for part in delta.get("tool_calls") or []:
                    known = by_index.setdefault(part["index"], {"id": part.get("id"), "type": "function",
                                                                "function": {"name": "", "arguments": ""}})
                    known["function"]["name"] += part["function"].get("name") or ""
                    known["function"]["arguments"] += part["function"].get("arguments") or ""
                finish = choice.get("finish_reason") or finish
        calls = list(by_index.values())
        if calls:
            message["tool_calls"] = calls
    turn = Turn(texts=[message.get("content") or ""], reasoning=reasoning, finish=finish,
                calls=[{"id": c["id"], "name": c["function"]["name"],
                        "arguments": json.loads(c["function"]["arguments"])} for c in calls])
    turn.items = [{k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}]
    return turn


def _responses_turn(raw: bytes, stream: bool) -> Turn:
    if not stream:
        response = json.loads(raw)
    else:
        events = named_events(raw)
        assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
        assert [n for n, _ in events].count("response.completed") == 1 and events[-1][0] == "response.completed"
        response = events[-1][1]["response"]
        assert response["id"] == events[0][1]["response"]["id"]
        # Every item as the client builds it from the events is the one the closing response lists, at its place.
        built: dict[int, dict[str, Any]] = {}
        for name, data in events:
            if name == "response.output_item.added":
                assert data["output_index"] == len(built)
                built[data["output_index"]] = {**data["item"], "content": [], "arguments": ""}
            elif name == "response.content_part.added":
                built[data["output_index"]]["content"].append({**data["part"], "text": ""})
            elif name == "response.output_text.delta":
                built[data["output_index"]]["content"][data["content_index"]]["text"] += data["delta"]
            elif name == "response.function_call_arguments.delta":
                built[data["output_index"]]["arguments"] += data["delta"]
            elif name == "response.output_text.done":
                assert built[data["output_index"]]["content"][data["content_index"]]["text"] == data["text"]
            elif name == "response.content_part.done":
                assert built[data["output_index"]]["content"][data["content_index"]]["text"] == data["part"]["text"]
            elif name == "response.output_item.done":
                item, mine = data["item"], built[data["output_index"]]
                assert item["id"] == mine["id"] and item["type"] == mine["type"]
                if item["type"] == "message":
                    assert [p["text"] for p in item["content"]] == [p["text"] for p in mine["content"]]
                if item["type"] == "function_call":
                    assert item["arguments"] == mine["arguments"]
                built[data["output_index"]] = item
        items = [built[k] for k in range(len(built))]
        if {i["id"] for i in response["output"]}.isdisjoint(i["id"] for i in items):
            # A first attempt passed on whole: vLLM's own closing event, whose items vLLM gives fresh ids.
            items = [{**i, "id": o["id"]} for i, o in zip(items, response["output"], strict=True)]
        assert response["output"] == items
    output = response["output"]
    turn = Turn(texts=["".join(p["text"] for p in i["content"]) for i in output if i["type"] == "message"],
                reasoning="".join(p["text"] for i in output if i["type"] == "reasoning" for p in i["content"] or []),
                calls=[{"id": i["call_id"], "name": i["name"], "arguments": json.loads(i["arguments"])}
                       for i in output if i["type"] == "function_call"],
                finish=response["status"])
    turn.items = [{k: v for k, v in i.items() if k not in ("id", "status")} for i in output]
    return turn


def _messages_turn(raw: bytes, stream: bool) -> Turn:
    if not stream:
        message = json.loads(raw)
        content, stop = message["content"], message["stop_reason"]
    else:
        events = named_events(raw)
        names = [n for n, _ in events]
        assert names.count("message_start") == 1 and names[0] == "message_start"
        assert names.count("message_stop") == 1 and names[-2:] == ["message_delta", "message_stop"]
        content, open_ = [], set()
        for name, data in events:
            if name == "content_block_start":
                assert data["index"] == len(content)
                content.append(dict(data["content_block"]))
                open_.add(data["index"])
            elif name == "content_block_delta":
                assert data["index"] in open_
                block, delta = content[data["index"]], data["delta"]
                if delta["type"] == "text_delta":
                    block["text"] += delta["text"]
                elif delta["type"] == "thinking_delta":
                    block["thinking"] += delta["thinking"]
                elif delta["type"] == "input_json_delta":
                    block["json"] = block.get("json", "") + delta["partial_json"]
            elif name == "content_block_stop":
                open_.remove(data["index"])
        assert not open_
        for block in content:
            if block["type"] == "tool_use" and "json" in block:
                block["input"] = json.loads(block.pop("json"))
        stop = events[-2][1]["delta"]["stop_reason"]
    turn = Turn(texts=[b["text"] for b in content if b["type"] == "text"],
                reasoning="".join(b["thinking"] for b in content if b["type"] == "thinking"),
                calls=[{"id": b["id"], "name": b["name"], "arguments": b["input"]}
                       for b in content if b["type"] == "tool_use"], finish=stop)
    turn.items = [{"role": "assistant", "content": content}]
    return turn


def ask(proxy: Any, route: str, stream: bool, body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None) -> Turn:
    with proxy.client() as client:
        response = client.post(PATHS[route], json=body or first_request(route, stream), headers=headers or {})
    assert response.status_code == 200, response.text
    return read_turn(route, response.content, stream)


def seen(route: str, stream: bool, *, narrated: str, said: str, line: str = LINE) -> str:
    """The text a client shows for a turn whose first attempt narrated `narrated` (streamed live) and whose delivered
    attempt said `said`, after one refusal: chat glues the texts with a paragraph break where the retry does not
    continue the narration; the structured routes put the retry's text in an item or block of its own."""
    held = narrated if stream else ""
    skip, separator = continuation(held, said, separate=route == "chat")
    text = held + separator + said[skip:]
    return text + line_break(text) + line if line else text


# ---------------------------------------------------------------- the rule, and the line


@pytest.mark.parametrize(("held", "said", "gets"), [
    ("", "Answer.", "Answer."),  # nothing held: all of it
    ("I will run a tool.", "I will run a tool.", ""),
    ("I will run a tool.", "I will run a tool. Answer.", " Answer."),
    ("I will run a tool.\n", "I will run a tool.\n\nAnswer.", "Answer."),  # the held text ends in a break already
    ("I will run a tool. ", "I will run a tool.", ""),  # whitespace around what is held aside
    ("  I will run a tool.", "\nI will run a tool. Answer.", " Answer."),
    ("I will run a tool.", "I will run", ""),  # less of the same
    ("I will run a tool.", "Answer.", "\n\nAnswer."),  # anything else: whole, after a break
    ("I will run a tool.", " Answer.", " Answer."),  # ... which it has already
    ("I will run a tool.", "I will run a tool!", "\n\nI will run a tool!"),  # exact characters only
])
def test_what_of_a_retrys_text_the_client_still_gets(held, said, gets):
    skip, separator = continuation(held, said)
    assert separator + said[skip:] == gets


def test_the_refusal_line_is_one_inert_line_naming_each_refused_call_once():
    from proxy.enforce.feedback_turns import refusal_note
    from proxy.enforce.judging import judge_calls
    from proxy.policy import load_policy_file
    from proxy.toolcalls.openai import structured_call
    from tests.conftest import ROOT

    policy = load_policy_file(ROOT / "policies" / "strict.yaml")

    def refused(*commands: str) -> list[Any]:
        calls = [structured_call(name="bash", arguments={"command": c}, call_id=f"call_{k}", index=k)
                 for k, c in enumerate(commands)]
        return judge_calls(policy, calls, {"bash"})

    assert refusal_note(policy, refused(PIPED, PIPED)) == LINE
    multi = refusal_note(policy, refused("ls\nrm -rf /", "echo <tool_call>", "cat a | b", "curl x", "wget y"))
    assert "\n" not in multi and "<" not in multi and multi.endswith(" and 2 more.")
    assert multi.startswith("allowlist-proxy refused in this turn: `ls\\nrm -rf /` (")
    # A client that runs what its text says gets the calls named, never quoted.
    assert refusal_note(policy, refused(PIPED), quote=False) == "allowlist-proxy refused in this turn: the `bash` " \
                                                               "call (pipe)."


# ---------------------------------------------------------------- the answer reaches the client


@SQLITE_ONLY
@pytest.mark.parametrize(("route", "stream"), CASES)
def test_narrates_is_refused_then_answers_in_text_the_user_sees_the_answer(upstream, proxy, route, stream):
    upstream.script(Reply(content=NARRATION, tool_calls=[("bash", {"command": PIPED})]), Reply(content=ANSWER))
    turn = ask(proxy, route, stream)
    expected = {"chat": f"{NARRATION}\n\n{ANSWER}\n\n{LINE}", "responses": f"{NARRATION}{ANSWER}\n\n{LINE}",
                "messages": f"{NARRATION}{ANSWER}\n\n{LINE}"}[route] if stream else f"{ANSWER}\n\n{LINE}"
    assert turn.text == expected == seen(route, stream, narrated=NARRATION, said=ANSWER)
    assert turn.text.count(NARRATION) == (1 if stream else 0) and turn.calls == []
    assert turn.finish == {"chat": "stop", "responses": "completed", "messages": "end_turn"}[route]
    if route != "chat":  # the answer is an item (block) of its own, after the narration's, and ends with the line:
        # clients that show only the last one (Claude Code's print mode, `codex exec`) show both
        assert turn.texts == ([NARRATION] if stream else []) + [f"{ANSWER}\n\n{LINE}"]
    rows = proxy.rows("SELECT attempt, decision, delivered FROM tool_calls ORDER BY attempt")
    assert [tuple(r) for r in rows] == [(1, "reject", 0)]
    assert tuple(proxy.rows("SELECT attempts, budget_exhausted FROM requests")[0]) == (2, 0)


# What the retry says -> the text a client holds after a streamed turn (the narration live), and after a whole one.
REPEATS = {
    NARRATION: (f"{NARRATION}\n\n{LINE}", f"{NARRATION}\n\n{LINE}"),
    f"{NARRATION} {ANSWER}": (f"{NARRATION} {ANSWER}\n\n{LINE}", f"{NARRATION} {ANSWER}\n\n{LINE}"),
    f"{NARRATION}\n\n{ANSWER}": (f"{NARRATION}\n\n{ANSWER}\n\n{LINE}", f"{NARRATION}\n\n{ANSWER}\n\n{LINE}"),
    f"\n{NARRATION}  {ANSWER}": (f"{NARRATION}  {ANSWER}\n\n{LINE}", f"\n{NARRATION}  {ANSWER}\n\n{LINE}"),
    "I will run": (f"{NARRATION}\n\n{LINE}", f"I will run\n\n{LINE}"),  # less of the same: nothing new
}


@SQLITE_ONLY
@pytest.mark.parametrize(("route", "stream"), CASES)
@pytest.mark.parametrize("said", list(REPEATS))
def test_narration_the_retry_repeats_is_not_sent_twice(upstream, proxy, route, stream, said):
    """A retry that says the narration again (whole, then more, or less of it) sends only what is new."""
    upstream.script(Reply(content=NARRATION, tool_calls=[("bash", {"command": PIPED})]), Reply(content=said))
    turn = ask(proxy, route, stream)
    assert turn.text == REPEATS[said][0 if stream else 1] == seen(route, stream, narrated=NARRATION, said=said)
    if stream and route != "chat":  # what is new is an item or block of its own, with the line; else the line is
        assert turn.texts[0] == NARRATION and len(turn.texts) == 2


@SQLITE_ONLY
@pytest.mark.parametrize(("route", "stream"), CASES)
def test_a_retry_with_text_and_an_allowed_call_delivers_both(upstream, proxy, route, stream):
    upstream.script(Reply(content=NARRATION, tool_calls=[("bash", {"command": PIPED})]),
                    Reply(content="Searching without the pipe.", tool_calls=[("bash", {"command": ALLOWED})]))
    turn = ask(proxy, route, stream)
    assert turn.text == seen(route, stream, narrated=NARRATION, said="Searching without the pipe.")
    assert [(c["name"], c["arguments"]) for c in turn.calls] == [("bash", {"command": ALLOWED})]
    assert turn.finish == {"chat": "tool_calls", "responses": "completed", "messages": "tool_use"}[route]


@SQLITE_ONLY
@pytest.mark.parametrize(("route", "stream"), CASES)
def test_a_retry_refused_until_the_budget_is_spent_ends_with_the_explanation_alone(upstream, proxy, route, stream):
    upstream.script(*[Reply(content=f"Try {n}.", tool_calls=[("bash", {"command": PIPED})]) for n in range(1, 5)])
    turn = ask(proxy, route, stream)
    explanation = turn.text.removeprefix("Try 1." if stream else "")
    assert explanation.startswith("allowlist-proxy blocked this turn after 4 attempts")
    assert "Try 2" not in turn.text and "Try 4" not in turn.text and "refused in this turn" not in turn.text
    assert turn.calls == []
    assert tuple(proxy.rows("SELECT attempts, budget_exhausted FROM requests")[0]) == (4, 1)


@SQLITE_ONLY
@pytest.mark.parametrize(("route", "stream"), CASES)
def test_the_line_is_not_added_where_the_answer_carries_it(upstream, proxy, route, stream):
    answer = f"{ANSWER}\n{LINE}"
    upstream.script(Reply(content=NARRATION, tool_calls=[("bash", {"command": PIPED})]), Reply(content=answer))
    turn = ask(proxy, route, stream)
    assert turn.text.count(LINE) == 1
    assert turn.text == seen(route, stream, narrated=NARRATION, said=answer, line="")


@SQLITE_ONLY
@pytest.mark.parametrize("route", ["chat", "responses", "messages"])
def test_reasoning_the_retry_repeats_is_not_sent_twice(upstream, proxy, route):
    upstream.script(Reply(content=NARRATION, reasoning="The user wants docs.",
                          tool_calls=[("bash", {"command": PIPED})]),
                    Reply(content=ANSWER, reasoning="The user wants docs. The pipe was refused."))
    turn = ask(proxy, route, True)
    assert turn.reasoning == "The user wants docs. The pipe was refused."
    assert turn.text == seen(route, True, narrated=NARRATION, said=ANSWER)


@SQLITE_ONLY
@pytest.mark.parametrize(("route", "stream"), CASES)
def test_every_call_refused_in_the_turn_is_named_once(upstream, proxy, route, stream):
    piped_tail = ALLOWED + " | tail -3"
    upstream.script(Reply(content=NARRATION, tool_calls=[("bash", {"command": PIPED})]),
                    Reply(tool_calls=[("bash", {"command": piped_tail}), ("bash", {"command": PIPED})]),
                    Reply(content=ANSWER))
    turn = ask(proxy, route, stream)
    assert turn.text.endswith(f"allowlist-proxy refused in this turn: `{PIPED}` (pipe); `{piped_tail}` (pipe).")


# ---------------------------------------------------------------- the session goes on


def follow_up(route: str, stream: bool, turn: Turn) -> dict[str, Any]:
    """The client's next request: its first request, the turn as it received it, the results of the calls it got
    (none: the user's next message)."""
    body = first_request(route, stream)
    key = "input" if route == "responses" else "messages"
    history = list(body[key]) + turn.items
    if route == "chat":
        history += [{"role": "tool", "tool_call_id": c["id"], "content": "3 results"} for c in turn.calls]
    elif route == "responses":
        history += [{"type": "function_call_output", "call_id": c["id"], "output": "3 results"} for c in turn.calls]
    elif turn.calls:
        history.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": c["id"],
                                                     "content": "3 results"} for c in turn.calls]})
    if not turn.calls:
        history.append({"type": "message", "role": "user", "content": "thanks"} if route == "responses"
                       else {"role": "user", "content": "thanks"})
    return {**body, key: history}


@SQLITE_ONLY
@pytest.mark.parametrize(("route", "stream"), CASES)
@pytest.mark.parametrize("named", [False, True])
@pytest.mark.parametrize("calls", [False, True])
def test_the_next_request_continues_the_session(upstream, proxy, route, stream, named, calls):
    """The lineage records the turn as the client got it (the narration once, the retry's text, the line, the
    calls): the conversation's next request, built from it, continues the session, with and without a header."""
    retry = Reply(content=ANSWER, tool_calls=[("bash", {"command": ALLOWED})] if calls else [])
    upstream.script(Reply(content=NARRATION, tool_calls=[("bash", {"command": PIPED})]), retry,
                    Reply(content="Done."))
    headers = {"x-session-id": "ses_follow"} if named else {}
    turn = ask(proxy, route, stream, headers=headers)
    assert LINE in turn.text and len(turn.calls) == int(calls)
    ask(proxy, route, stream, follow_up(route, stream, turn), headers=headers)
    ask(proxy, route, stream, first_request(route, stream))  # another conversation: a session of its own
    sessions = [r[0] for r in proxy.rows("SELECT session_id FROM requests ORDER BY started_at")]
    assert sessions[0] == sessions[1] != sessions[2]
    assert sessions[0] == "ses_follow" if named else sessions[0].startswith("lin_")


# ---------------------------------------------------------------- what the openai SDK shows its user


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_sdk_shows_the_answer_on_chat(upstream, proxy, stream):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="none", max_retries=0)
    upstream.script(Reply(content=NARRATION, tool_calls=[("bash", {"command": PIPED})]), Reply(content=ANSWER))
    messages: list[Any] = [{"role": "user", "content": USER}]
    if stream:
        shown = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
            model=MODEL, messages=messages, tools=OPENCODE_TOOLS, stream=True) if chunk.choices)
    else:
        shown = client.chat.completions.create(model=MODEL, messages=messages,
                                               tools=OPENCODE_TOOLS).choices[0].message.content
    assert shown == (f"{NARRATION}\n\n" if stream else "") + f"{ANSWER}\n\n{LINE}"
    upstream.script(Reply(content="Glad to help."))
    client.chat.completions.create(model=MODEL, messages=[*messages, {"role": "assistant", "content": shown},
                                                          {"role": "user", "content": "thanks"}])
    assert len({r[0] for r in proxy.rows("SELECT session_id FROM requests")}) == 1


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_sdk_shows_the_answer_on_responses(upstream, proxy, stream):
    """The SDK's stream helper rebuilds the response from the events and checks every item's identity against
    the closing event; `output_text` is what an app shows."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="none", max_retries=0)
    upstream.script(Reply(content=NARRATION, tool_calls=[("bash", {"command": PIPED})]),
                    Reply(content=ANSWER, tool_calls=[("bash", {"command": ALLOWED})]))
    request: dict[str, Any] = {"model": MODEL, "input": USER, "tools": RESPONSES_TOOLS}
    if stream:
        with client.responses.stream(**request) as events:
            deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            response = events.get_final_response()
        assert deltas == response.output_text
    else:
        response = client.responses.create(**request)
    assert response.output_text == (NARRATION if stream else "") + f"{ANSWER}\n\n{LINE}"
    calls = [item for item in response.output if item.type == "function_call"]
    assert [json.loads(c.arguments) for c in calls] == [{"command": ALLOWED}]
    upstream.script(Reply(content="Found them."))
    follow = [{"type": "message", "role": "user", "content": USER}, *[i.model_dump(exclude_none=True)
                                                                        for i in response.output],
              {"type": "function_call_output", "call_id": calls[0].call_id, "output": "3 results"}]
    client.responses.create(model=MODEL, input=follow, tools=RESPONSES_TOOLS)
    assert len({r[0] for r in proxy.rows("SELECT session_id FROM requests")}) == 1
