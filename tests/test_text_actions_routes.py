"""Text actions on every judged route (chat completions, Responses, Anthropic Messages), streamed and whole, through
the real proxy and the scripted upstream: a text-acting client's rejected action is re-prompted within the budget
and never delivered, an allowed one is delivered once, a spent budget ends in the explanation alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.config import Settings
from proxy.dialects.shapes import parts_text
from proxy.http.app import create_app
from proxy.testing.raw_upstream import RawAnswer
from proxy.testing.scripted_upstream import Reply
from proxy.testing.server import ServerThread
from tests.conftest import MODEL, STRICT_POLICY, RunningProxy
from tests.test_hostile_upstream import raw_upstream as raw_upstream  # a fixture, asked for by name
from tests.test_hostile_upstream import resp, typed

SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])
ROUTES = pytest.mark.parametrize("route", ["chat", "responses", "messages"])
STREAMS = pytest.mark.parametrize("stream", [False, True])
MSWEA_SYSTEM = ("You are a helpful assistant that can interact with a computer. Your response must contain exactly "
                "ONE bash code block, formatted as ```mswea_bash_command ...```. To finish, run "
                "`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`.")
CLINE_SYSTEM = ("You are Cline.\n\n## execute_command\nUsage:\n<execute_command>\n"
                "<command>Your command here</command>\n<requires_approval>true or false</requires_approval>\n"
                "</execute_command>\n")
ALLOWED = 'uv run scripts/search.py "rust async"'
PIPED = "cat /etc/passwd | head"


def refused(*calls: str) -> str:
    """The line a turn delivered after a refusal ends with; a text-acting client's names the refused actions
    without quoting them."""
    return "allowlist-proxy refused in this turn: " + "; ".join(calls) + "."


MSWEA_PIPE = refused("the `mswea_bash_command` action (pipe)")


def block(command: str) -> str:
    return f"THOUGHT: go.\n\n```mswea_bash_command\n{command}\n```\n"


def cline(command: str) -> str:
    return f"I will run it.\n<execute_command>\n<command>{command}</command>\n" \
           "<requires_approval>false</requires_approval>\n</execute_command>"


def ask(proxy: Any, route: str, system: str, stream: bool) -> Any:
    task = "fix the bug"
    if route == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "system", "content": system},
                                                           {"role": "user", "content": task}]}
    elif route == "responses":
        path, body = "/v1/responses", {"instructions": system, "input": task}
    else:
        path, body = "/v1/messages", {"system": system, "max_tokens": 500,
                                      "messages": [{"role": "user", "content": task}]}
    with proxy.client() as client:
        return client.post(path, json={"model": MODEL, "stream": stream, **body}, headers={"x-session-id": "ses_t"})


def said(route: str, response: Any, stream: bool) -> str:
    """The text the client holds, read the way that route's clients read it."""
    assert response.status_code == 200, response.text
    if not stream:
        obj = response.json()
        if route == "chat":
            return str(obj["choices"][0]["message"]["content"])
        if route == "responses":
            return "".join(parts_text(i.get("content")) for i in obj["output"] if i["type"] == "message")
        return "".join(b["text"] for b in obj["content"] if b["type"] == "text")
    events = events_of(response.content)
    if route == "chat":
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in events if c.get("choices"))
    if route == "responses":
        deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        (completed,) = [e for e in events if e["type"] == "response.completed"]
        closing = "".join(parts_text(i.get("content")) for i in completed["response"]["output"]
                          if i["type"] == "message")
        assert deltas == closing, "the closing response lists what streamed"
        return deltas
    return "".join(e["delta"]["text"] for e in events
                   if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta")


def events_of(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for part in raw.decode().split("\n\n"):
        data = [line[6:] for line in part.splitlines() if line.startswith("data: ")]
        if data and data[0] != "[DONE]":
            out.append(json.loads("\n".join(data)))
    return out


def retried(route: str, body: dict[str, Any]) -> tuple[str, str]:
    """The held assistant turn and the proxy's note, as the retry's conversation carries them."""
    if route == "chat":
        assistant, note = body["messages"][-2:]
        return assistant["content"], note["content"]
    if route == "responses":
        assistant, note = body["input"][-2:]
        assert (assistant["role"], note["role"]) == ("assistant", "user")
        return parts_text(assistant["content"]), parts_text(note["content"])
    assistant, note = body["messages"][-2:]
    assert (assistant["role"], note["role"]) == ("assistant", "user")
    return parts_text(assistant["content"]), parts_text(note["content"])


@SQLITE_ONLY
@ROUTES
@STREAMS
def test_a_rejected_text_action_is_reprompted_and_never_delivered(upstream, proxy, route, stream):
    upstream.script(Reply(content=block(PIPED)), Reply(content=block(ALLOWED)))
    text = said(route, ask(proxy, route, MSWEA_SYSTEM, stream), stream)
    assert text == block(ALLOWED) + "\n" + MSWEA_PIPE and "passwd" not in text
    assert len(upstream.requests) == 2
    held, note = retried(route, upstream.requests[1])
    assert held == block(PIPED) and "pipe" in note and "Not run" in note
    rows = proxy.rows("SELECT decision, source, delivered FROM tool_calls ORDER BY attempt")
    assert [tuple(r) for r in rows] == [("reject", "text:mswea_bash_command", 0),
                                        ("allow", "text:mswea_bash_command", 1)]


@SQLITE_ONLY
@ROUTES
@STREAMS
def test_a_spent_budget_delivers_the_explanation_alone(upstream, proxy, route, stream):
    upstream.responder = lambda body: Reply(content=block(PIPED))
    text = said(route, ask(proxy, route, MSWEA_SYSTEM, stream), stream)
    assert text.startswith("allowlist-proxy blocked this turn") and "```mswea_bash_command" not in text
    assert len(upstream.requests) == 4  # the first attempt and the strict policy's budget of 3
    assert proxy.rows("SELECT count(*) FROM tool_calls WHERE delivered = 1")[0][0] == 0


@SQLITE_ONLY
@ROUTES
@STREAMS
def test_an_allowed_text_action_is_delivered_once(upstream, proxy, route, stream):
    upstream.script(Reply(content=block(ALLOWED)))
    assert said(route, ask(proxy, route, MSWEA_SYSTEM, stream), stream) == block(ALLOWED)
    assert len(upstream.requests) == 1


@SQLITE_ONLY
@pytest.mark.parametrize("route", ["responses", "messages"])
@STREAMS
def test_cline_tags_are_judged_on_the_structured_routes(upstream, proxy, route, stream):
    upstream.script(Reply(content=cline(PIPED)), Reply(content=cline(ALLOWED)))
    text = said(route, ask(proxy, route, CLINE_SYSTEM, stream), stream)
    assert text == cline(ALLOWED) + "\n\n" + refused("the `execute_command` action (pipe)")
    rows = proxy.rows("SELECT tool_name, decision FROM tool_calls ORDER BY attempt")
    assert [tuple(r) for r in rows] == [("execute_command", "reject"), ("execute_command", "allow")]


@SQLITE_ONLY
@pytest.mark.parametrize("route", ["responses", "messages"])
@STREAMS
def test_text_of_a_client_that_does_not_run_it_is_left_alone(upstream, proxy, route, stream):
    upstream.script(Reply(content=block(PIPED)))
    assert said(route, ask(proxy, route, "You are a helpful assistant.", stream), stream) == block(PIPED)
    assert len(upstream.requests) == 1 and proxy.rows("SELECT count(*) FROM tool_calls")[0][0] == 0


@SQLITE_ONLY
@pytest.mark.parametrize("route", ["responses", "messages"])
def test_the_first_attempts_text_is_held_for_a_text_client(upstream, proxy, route):
    """Streamed: nothing of a rejected attempt's text reaches the client, not even before the verdict."""
    upstream.script(Reply(content=block(PIPED)), Reply(content=block(ALLOWED)))
    response = ask(proxy, route, MSWEA_SYSTEM, True)
    assert b"passwd" not in response.content and said(route, response, True) == block(ALLOWED) + "\n" + MSWEA_PIPE


# ---------------------------------------------------------------- every spelling of the text is the one judged


def _message(text: str) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def _responses_stream(streamed: str, closing: dict[str, str]) -> RawAnswer:
    """A message item whose deltas say `streamed` while the places named in `closing` say another text."""
    where = {"part": streamed, "text_done": streamed, "item_done": streamed, "completed": streamed, **closing}
    empty = {**_message(""), "content": [], "status": "in_progress"}
    common = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    return typed({"type": "response.created", "response": resp(status="in_progress")},
                 {"type": "response.output_item.added", "output_index": 0, "item": empty},
                 {"type": "response.content_part.added", **common,
                  "part": {"type": "output_text", "text": where.get("part_added", ""), "annotations": []}},
                 {"type": "response.output_text.delta", **common, "delta": streamed},
                 {"type": "response.output_text.done", **common, "text": where["text_done"]},
                 {"type": "response.content_part.done", **common,
                  "part": {"type": "output_text", "text": where["part"], "annotations": []}},
                 {"type": "response.output_item.done", "output_index": 0, "item": _message(where["item_done"])},
                 {"type": "response.completed", "response": resp([_message(where["completed"])])})


@pytest.mark.parametrize("place", ["part_added", "text_done", "part", "item_done", "completed"])
def test_a_responses_text_spelt_otherwise_where_a_client_reads_it_is_refused(raw_upstream, tmp_path, place):
    """A text-acting client may read its action from a `.done` event, the done item or the closing response:
    where one of them says other than the deltas judged, the attempt is unjudgeable, never delivered."""
    app = create_app(Settings(upstream=raw_upstream.url, db=f"sqlite:///{tmp_path / 'store.db'}",
                              policy=STRICT_POLICY, log_level="warning"))
    raw_upstream.script(_responses_stream(block(ALLOWED), {place: block(PIPED)}),
                        _responses_stream(block(ALLOWED), {}))
    with ServerThread(app) as server:
        proxy = RunningProxy(server, app, f"sqlite:///{tmp_path / 'store.db'}")
        response = ask(proxy, "responses", MSWEA_SYSTEM, True)
        assert b"passwd" not in response.content
        assert said("responses", response, True) == block(ALLOWED) + "\n" + refused("the `message` call (unjudgeable)")
        rows = proxy.rows("SELECT decision, reasons FROM tool_calls WHERE delivered = 0")
    assert ("reject", "unjudgeable") in [tuple(r) for r in rows]


# ---------------------------------------------------------------- raw completions: refused, never re-asked


def _complete(proxy: Any, prompt: str, stream: bool) -> Any:
    with proxy.client() as client:
        return client.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "stream": stream,
                                                    "max_tokens": 200}, headers={"x-session-id": "ses_c"})


def _completion_text(response: Any, stream: bool) -> str:
    if not stream:
        return "".join(c["text"] for c in response.json()["choices"])
    return "".join(c.get("text") or "" for e in events_of(response.content) for c in e.get("choices") or [])


@SQLITE_ONLY
@STREAMS
def test_a_raw_completion_with_a_rejected_text_action_is_refused(upstream, proxy, stream):
    """A raw completion cannot be re-asked (docs/routes.md): a text-acting client's rejected action refuses the
    completion as a rejected call does, and its text never reaches the client as an action."""
    upstream.script(Reply(content=block(PIPED)))
    response = _complete(proxy, MSWEA_SYSTEM + "\nfix the bug\n", stream)
    assert b"```mswea_bash_command" not in response.content
    if stream:
        assert [e["error"]["code"] for e in events_of(response.content) if "error" in e] == ["tool_call_rejected"]
    else:
        assert response.status_code == 403 and response.json()["error"]["code"] == "tool_call_rejected"
    rows = proxy.rows("SELECT decision, source, delivered FROM tool_calls")
    assert [tuple(r) for r in rows] == [("reject", "text:mswea_bash_command", 0)]


@SQLITE_ONLY
@STREAMS
def test_a_raw_completion_with_an_allowed_text_action_passes(upstream, proxy, stream):
    upstream.script(Reply(content=block(ALLOWED)))
    response = _complete(proxy, MSWEA_SYSTEM + "\nfix the bug\n", stream)
    assert response.status_code == 200 and _completion_text(response, stream) == block(ALLOWED)
    assert [tuple(r) for r in proxy.rows("SELECT decision, delivered FROM tool_calls")] == [("allow", 1)]


@SQLITE_ONLY
@ROUTES
def test_a_cline_spelling_its_releases_read_differently_is_refused(upstream, proxy, route):
    """`<path>` closed by `</parameter>`: one release reads `a.txt</parameter><path>/etc/passwd`, a newer one
    `/etc/passwd`. The proxy judges neither reading: the action is unjudgeable and never reaches Cline."""
    ambiguous = "<read_file><path>a.txt</parameter><path>/etc/passwd</path></read_file>"
    upstream.script(Reply(content=ambiguous), Reply(content=cline(ALLOWED)))
    assert said(route, ask(proxy, route, CLINE_SYSTEM, True), True) == (
        cline(ALLOWED) + "\n\n" + refused("the `read_file` action (unjudgeable)"))
    rows = proxy.rows("SELECT tool_name, decision, reasons FROM tool_calls ORDER BY attempt")
    assert [tuple(r) for r in rows] == [("read_file", "reject", "unjudgeable"), ("execute_command", "allow", "")]


ROO_SYSTEM = ("You are Roo, a highly skilled software engineer.\n\n## execute_command\nUsage:\n<execute_command>\n"
              "<command>Your command here</command>\n<cwd>Working directory path (optional)</cwd>\n"
              "</execute_command>\n\n## apply_diff\n")


@SQLITE_ONLY
@pytest.mark.parametrize("route", ["chat", "messages"])
def test_roo_code_is_recognised_and_its_own_tags_judged(upstream, proxy, route):
    """Roo Code (and Kilo Code's legacy prompt) writes Cline's grammar with names of its own: `<apply_diff>`
    to a protected file and a command run in `<cwd>/etc</cwd>` are refused, the plain command passes."""
    protected = "<apply_diff><path>.git/hooks/pre-commit</path><diff>x</diff></apply_diff>"
    elsewhere = f"<execute_command><command>{ALLOWED}</command><cwd>/etc</cwd></execute_command>"
    plain = f"<execute_command><command>{ALLOWED}</command></execute_command>"
    upstream.script(Reply(content=protected), Reply(content=elsewhere), Reply(content=plain))
    assert said(route, ask(proxy, route, ROO_SYSTEM, False), False) == plain + "\n\n" + refused(
        "the `apply_diff` action (protected_path)", "the `execute_command` action (absolute_path)")
    rows = proxy.rows("SELECT tool_name, decision, reasons FROM tool_calls ORDER BY attempt")
    assert [tuple(r) for r in rows] == [("apply_diff", "reject", "protected_path"),
                                        ("execute_command", "reject", "absolute_path"),
                                        ("execute_command", "allow", "")]

