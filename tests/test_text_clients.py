"""Agents that act on text (mini-swe-agent's ```mswea_bash_command blocks, Cline-style XML tags): a client
recognised by its own system prompt has the actions in the model's text judged, enforced and recorded like
tool calls; a rejected action is re-prompted with the reasons as a user message; a client whose actions the
proxy cannot judge is counted as ungoverned."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.testing.scripted_upstream import Reply
from tests.conftest import chat, sse_json

SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])
MSWEA_SYSTEM = ("You are a helpful assistant that can interact with a computer. Your response must contain exactly "
                "ONE bash code block, formatted as ```mswea_bash_command ...```. To finish, run "
                "`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`.")
ALLOWED = 'uv run scripts/search.py "rust async"'


def _block(command: str) -> str:
    return f"THOUGHT: go.\n\n```mswea_bash_command\n{command}\n```\n"


def _ask(proxy, system: str, stream: bool):
    body = chat([{"role": "system", "content": system}, {"role": "user", "content": "fix the bug"}], stream=stream)
    with proxy.client() as client:
        return client.post("/v1/chat/completions", json=body, headers={"x-session-id": "ses_text"})


def _text(response: Any, stream: bool) -> str:
    if not stream:
        return response.json()["choices"][0]["message"]["content"]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in sse_json(response.content) if c["choices"])


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [False, True])
def test_a_rejected_text_action_is_reprompted_and_never_reaches_the_client(upstream, proxy, stream):
    upstream.script(Reply(content=_block("cat /etc/passwd | head")), Reply(content=_block(ALLOWED)))
    response = _ask(proxy, MSWEA_SYSTEM, stream)
    said = _text(response, stream)
    # After it the line that says what was refused, naming the action without quoting it.
    assert said == _block(ALLOWED) + "\nallowlist-proxy refused in this turn: the `mswea_bash_command` action (pipe)."
    assert "passwd" not in said
    assert len(upstream.requests) == 2
    retry = upstream.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": _block("cat /etc/passwd | head")}
    assert retry[-1]["role"] == "user" and "pipe" in retry[-1]["content"]
    rows = proxy.rows("SELECT tool_name, decision, source FROM tool_calls")
    assert sorted(tuple(r) for r in rows) == [("mswea_bash_command", "allow", "text:mswea_bash_command"),
                                              ("mswea_bash_command", "reject", "text:mswea_bash_command")]


@SQLITE_ONLY
def test_the_clients_sentinel_is_allowed_verbatim(upstream, proxy):
    upstream.script(Reply(content=_block("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")))
    response = _ask(proxy, MSWEA_SYSTEM, False)
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in _text(response, False)
    assert len(upstream.requests) == 1


@SQLITE_ONLY
def test_text_of_a_client_that_does_not_run_it_is_left_alone(upstream, proxy):
    upstream.script(Reply(content=_block("cat /etc/passwd | head")))
    response = _ask(proxy, "You are a helpful assistant.", False)
    assert "passwd" in _text(response, False) and len(upstream.requests) == 1
    assert proxy.rows("SELECT count(*) FROM tool_calls")[0][0] == 0


@SQLITE_ONLY
def test_an_unclosed_block_and_a_code_agent_are_counted_ungoverned(upstream, proxy):
    from proxy.stats.prometheus import UNGOVERNED_TEXT

    def count(client: str) -> float:
        return UNGOVERNED_TEXT.labels("qwen3.5-27b", client)._value.get()

    before = count("mini-swe-agent"), count("smolagents-code")
    upstream.script(Reply(content="```mswea_bash_command\nls\n"),
                    Reply(content="Thought: go\n<code>\nimport os; os.system('rm -rf /')\n</code>"))
    _ask(proxy, MSWEA_SYSTEM, False)
    _ask(proxy, "Use final_answer(...). End code with </code>.", False)
    assert (count("mini-swe-agent"), count("smolagents-code")) == (before[0] + 1, before[1] + 1)
    proxy.flush()
    with proxy.client() as client:
        (entry,) = client.get("/stats/models").json()["models"]
    assert entry["ungoverned_text_actions"] == 2  # stored with the requests: the dashboard's figure
    assert [r[0] for r in proxy.rows("SELECT ungoverned_text FROM requests")] == [1, 1]


def test_an_exact_command_of_the_policy_is_allowed_verbatim_and_only_so():
    from proxy.policy.judge import judge_command
    from proxy.policy.schema import Policy

    policy = Policy.model_validate({"name": "p", "shell": {"exact": ["git status --short"]}})
    assert judge_command(policy, "git status --short").allowed
    assert not judge_command(policy, "git status  --short").allowed
    assert not judge_command(policy, "git status --short; rm -rf /").allowed


@SQLITE_ONLY
@pytest.mark.parametrize("stream", [False, True])
def test_an_unreadable_action_on_the_messages_route_is_counted_ungoverned(upstream, proxy, stream):
    """Every route judges text actions (tests/test_text_actions_routes.py); what a format recognises but cannot
    read is counted there as on chat."""
    from proxy.stats.prometheus import UNGOVERNED_TEXT

    counter = UNGOVERNED_TEXT.labels("qwen3.5-27b", "mini-swe-agent")
    before = counter._value.get()
    upstream.script(Reply(content="```mswea_bash_command\nls\n"))
    body = {"model": "qwen3.5-27b", "max_tokens": 100, "system": MSWEA_SYSTEM, "stream": stream,
            "messages": [{"role": "user", "content": "fix the bug"}]}
    with proxy.client() as client:
        assert client.post("/v1/messages", json=body).status_code == 200
    assert counter._value.get() == before + 1


def test_a_dspy_step_reads_the_same_with_the_refusal_note_after_it():
    """DSPy's reader keeps the whole text as each action's source: the note is compared by what the actions do
    (name, arguments, error), so a step that names a tool still carries it."""
    from proxy.enforce.exchange import _read
    from proxy.toolcalls.text_actions import NO_CONTEXT

    step = ("[[ ## next_thought ## ]]\nI will search.\n\n[[ ## next_tool_name ## ]]\nsearch\n\n"
            "[[ ## next_tool_args ## ]]\n{\"query\": \"x\"}\n\n[[ ## completed ## ]]")
    note = "allowlist-proxy refused in this turn: the `search` action (pipe)."
    found = _read("dspy_chat", step, NO_CONTEXT)
    assert found[0] and _read("dspy_chat", f"{step}\n\n{note}", NO_CONTEXT) == found
