"""Opt-in safe repair through the proxy, and feedback variants: a scripted MoE-like model that pipes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from proxy.policy import load_policy_file
from proxy.policy.feedback.repair import repair_call
from proxy.policy.feedback.variants import variant_for
from proxy.testing.characters import OPENCODE_TOOLS, bash_sequence, looping
from proxy.testing.scripted_upstream import Reply
from tests.conftest import MODEL, ROOT, chat, sse_json
from tests.test_dialects import ROUTES, ask, assert_valid_stream, messages_calls, responses_calls

STRICT = ROOT / "policies" / "strict.yaml"
CLIENTS = Path(__file__).parent / "policy" / "client_tools"
ALLOWED = 'uv run scripts/search.py "rust async"'
REPAIRS = "repair: [output_filters, stderr_redirect, timeout, cd_workdir]\n"


def _policy_file(tmp_path: Path, extra: str, name: str = "repairing") -> Path:
    # The extra keys go before the shipped file's closing `...` (YAML's end marker, docs/policy.md).
    text = STRICT.read_text().replace("name: strict-uv-scripts", f"name: {name}\n{extra}")
    folder = tmp_path / f"policies-{name}"
    folder.mkdir()
    path = folder / "policy.yaml"
    path.write_text(text)
    return path


def _ask(proxy, *, stream: bool, session: str = "ses_repair"):
    body = chat([{"role": "user", "content": "find rust async docs"}], tools=OPENCODE_TOOLS, stream=stream)
    with proxy.client() as client:
        return client.post("/v1/chat/completions", json=body, headers={"x-session-id": session})


def _delivered(response, stream: bool) -> list[dict]:
    if stream:
        deltas = [d for chunk in sse_json(response.content) for c in chunk.get("choices", [])
                  for d in c.get("delta", {}).get("tool_calls") or []]
        return [json.loads(d["function"]["arguments"]) for d in deltas]
    calls = response.json()["choices"][0]["message"]["tool_calls"]
    return [json.loads(c["function"]["arguments"]) for c in calls]


@pytest.mark.parametrize("stream", [False, True])
def test_repair_on_delivers_the_allowed_call_after_one_attempt(upstream, start_proxy, tmp_path, stream):
    proxy = start_proxy(upstream.url, policy=str(_policy_file(tmp_path, REPAIRS)))
    upstream.responder = looping()  # `... | head -5`, then `| head -10`, `| tail -3`, then the plain call
    response = _ask(proxy, stream=stream)
    assert response.status_code == 200
    assert _delivered(response, stream) == [{"command": ALLOWED}]
    assert b"head" not in response.content
    assert len(upstream.requests) == 1  # no re-generation
    (row,) = proxy.rows("SELECT decision, command, repaired_command, reasons, shape, delivered, arguments_raw "
                        "FROM tool_calls")
    assert (row["decision"], row["command"], row["repaired_command"]) == ("repaired", f"{ALLOWED} | head -5", ALLOWED)
    assert (row["reasons"], row["shape"], bool(row["delivered"])) == ("pipe", "pipe", True)
    assert "head -5" in row["arguments_raw"]
    # A repaired call is an error in the figures: the model broke the rule.
    stats = proxy.rows("SELECT decision, n FROM stats_calls")
    assert [(r["decision"], r["n"]) for r in stats] == [("repaired", 1)]


@pytest.mark.parametrize("stream", [False, True])
def test_repair_of_a_call_written_in_content(upstream, start_proxy, tmp_path, stream):
    # Qwen3-Coder XML left in content (no tool parser upstream): converted, repaired, delivered as tool_calls.
    proxy = start_proxy(upstream.url, policy=str(_policy_file(tmp_path, REPAIRS)))
    upstream.responder = bash_sequence([f"timeout 30 {ALLOWED} 2>&1"], xml=True)
    response = _ask(proxy, stream=stream)
    assert _delivered(response, stream) == [{"command": ALLOWED}]
    assert b"timeout" not in response.content and b"<tool_call>" not in response.content
    assert len(upstream.requests) == 1
    (row,) = proxy.rows("SELECT decision, command, repaired_command FROM tool_calls")
    assert tuple(row) == ("repaired", f"timeout 30 {ALLOWED} 2>&1", ALLOWED)


@pytest.mark.parametrize("stream", [False, True])
def test_repair_off_is_as_today(upstream, proxy, stream):
    upstream.responder = looping()
    response = _ask(proxy, stream=stream)
    assert _delivered(response, stream) == [{"command": ALLOWED}]
    assert len(upstream.requests) == 4
    rows = proxy.rows("SELECT decision, repaired_command FROM tool_calls ORDER BY attempt")
    assert [(r["decision"], r["repaired_command"]) for r in rows] == [("reject", None)] * 3 + [("allow", None)]


def test_cd_becomes_the_workdir_and_unlisted_layers_are_not_repaired(upstream, start_proxy, tmp_path):
    proxy = start_proxy(upstream.url, policy=str(_policy_file(tmp_path, "repair: [cd_workdir]\n")))
    upstream.responder = bash_sequence([f"cd docs && {ALLOWED}"])
    assert _delivered(_ask(proxy, stream=True), True) == [{"command": ALLOWED, "workdir": "docs"}]
    assert len(upstream.requests) == 1
    # `| head -5` is not in this policy's list: rejected and retried, as without repair.
    upstream.requests.clear()
    upstream.responder = looping()
    assert _delivered(_ask(proxy, stream=False, session="ses_other"), False) == [{"command": ALLOWED}]
    assert len(upstream.requests) == 4


@pytest.mark.parametrize(("command", "repaired"), [
    (f"{ALLOWED} | head -5", ALLOWED),
    (f"{ALLOWED} | grep -i tokio | tail -3", ALLOWED),
    (f"{ALLOWED} 2>&1", ALLOWED),
    (f"{ALLOWED} 2>&1 | head -20", ALLOWED),
    (f"timeout 30 {ALLOWED}", ALLOWED),
    (f"{ALLOWED} > out.txt", None),  # a file redirect is no listed repair
    (f"time {ALLOWED}", None),  # nor another wrapper
    (f"{ALLOWED} | sh", None),
    (f"cd /tmp && {ALLOWED}", None),  # the workdir would leave the project
    (f"cd .. && {ALLOWED}", None),
    ("cd scripts && uv run search.py x", None),  # the core itself is not allowed
    (f"{ALLOWED}; rm -rf ~", None),
])
def test_repair_table(tmp_path, command, repaired):
    policy = load_policy_file(_policy_file(tmp_path, REPAIRS)).policy
    fix = repair_call(policy, "bash", {"command": command})
    assert (fix.command if fix else None) == repaired
    assert repair_call(load_policy_file(STRICT).policy, "bash", {"command": command}) is None  # off by default


def test_variants_are_assigned_uniformly(tmp_path):
    variants = ('feedback_variants:\n  plain: "Rejected ({reasons})."\n'
                '  suggest: "Rejected ({reasons}). {suggestion}"\n  hint: "Rejected ({reasons}). {hint}"\n')
    policy = load_policy_file(_policy_file(tmp_path, variants)).policy
    counts = Counter(variant_for(policy, f"ses_{i}") for i in range(6000))
    assert set(counts) == {"plain", "suggest", "hint"}
    # Chi-square with 2 degrees of freedom under 13.8 (p = 0.001): no variant is favoured.
    assert sum((n - 2000) ** 2 / 2000 for n in counts.values()) < 13.8
    assert variant_for(policy, "ses_1") == variant_for(policy, "ses_1")  # one session keeps its variant
    assert variant_for(load_policy_file(STRICT).policy, "ses_1") is None


def test_session_reads_its_variant_and_it_is_recorded(upstream, start_proxy, tmp_path):
    # The scripted model reads a tool result starting with "Rejected" as a refusal.
    variants = 'feedback_variants:\n  plain: "Rejected ({reasons})."\n  suggest: "Rejected: {suggestion}"\n'
    path = _policy_file(tmp_path, variants)
    proxy = start_proxy(upstream.url, policy=str(path))
    policy = load_policy_file(path).policy
    for session in ("ses_a", "ses_b", "ses_c", "ses_d"):
        upstream.requests.clear()
        upstream.responder = bash_sequence([f"{ALLOWED} | head -5", ALLOWED])
        _ask(proxy, stream=True, session=session)
        feedback = upstream.requests[1]["messages"][-1]["content"]
        wanted = variant_for(policy, session)
        expected = "Rejected (pipe)." if wanted == "plain" else (
            f"Rejected: Run `{ALLOWED}` alone: its whole output comes back to you.")
        assert feedback == expected
        rows = proxy.rows("SELECT feedback_variant FROM tool_calls WHERE session_id = :s", s=session)
        assert [r["feedback_variant"] for r in rows] == [wanted, wanted]


# ---------------------------------------------------------------- the Responses and Messages routes


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", ["responses", "messages"])
def test_dialect_routes_deliver_the_repaired_call_after_one_attempt(upstream, start_proxy, tmp_path, route, stream):
    # The repaired call goes out re-encoded from the judged call, never as the upstream wrote it.
    proxy = start_proxy(upstream.url, policy=str(_policy_file(tmp_path, REPAIRS)))
    upstream.responder = looping()
    response = ask(proxy, route, stream=stream)
    assert response.status_code == 200
    _, _, calls, _ = ROUTES[route]
    assert [(c["name"], c["arguments"]) for c in calls(response.content, stream)] == [("bash", {"command": ALLOWED})]
    assert b"head" not in response.content
    if stream:
        assert_valid_stream(route, response.content)
    assert len(upstream.requests) == 1
    (row,) = proxy.rows("SELECT route, decision, command, repaired_command, delivered FROM tool_calls")
    assert tuple(row) == (route, "repaired", f"{ALLOWED} | head -5", ALLOWED, 1)


@pytest.mark.parametrize("route", ["responses", "messages"])
def test_dialect_routes_without_repair_are_as_today(upstream, proxy, route):
    upstream.responder = looping()
    response = ask(proxy, route, stream=True)
    _, _, calls, _ = ROUTES[route]
    assert [c["arguments"] for c in calls(response.content, True)] == [{"command": ALLOWED}]
    assert len(upstream.requests) == 4
    assert [r["decision"] for r in proxy.rows("SELECT decision FROM tool_calls ORDER BY attempt")] == [
        "reject", "reject", "reject", "allow"]


# ---------------------------------------------------------------- other clients' shell tools (the tool profiles)


def _client(name: str) -> dict:
    return json.loads((CLIENTS / f"{name}.json").read_text())


@pytest.mark.parametrize("stream", [False, True])
def test_claude_codes_bash_is_repaired_on_messages(upstream, start_proxy, tmp_path, stream):
    client = _client("claude-code")
    proxy = start_proxy(upstream.url, policy=str(_policy_file(tmp_path, REPAIRS)))
    upstream.script(Reply(content="Searching.", tool_calls=[("Bash", {"command": f"{ALLOWED} 2>&1 | head -5"})]))
    body = {"model": MODEL, "max_tokens": 1024, "messages": [{"role": "user", "content": "find rust async docs"}],
            "tools": client["tools"], "stream": stream}
    with proxy.client() as http:
        response = http.post("/v1/messages", json=body, headers={"user-agent": client["user_agent"]})
    assert [(c["name"], c["arguments"]) for c in messages_calls(response.content, stream)] == [
        ("Bash", {"command": ALLOWED})]
    if stream:
        assert_valid_stream("messages", response.content)
    assert b"head" not in response.content and len(upstream.requests) == 1
    (row,) = proxy.rows("SELECT tool_name, decision, command, repaired_command FROM tool_calls")
    assert tuple(row) == ("Bash", "repaired", f"{ALLOWED} 2>&1 | head -5", ALLOWED)
    assert proxy.rows("SELECT profiles FROM requests")[0][0] == "claude-code"


@pytest.mark.parametrize("stream", [False, True])
def test_codex_exec_command_is_repaired_on_responses_with_its_workdir(upstream, start_proxy, tmp_path, stream):
    client = _client("codex")
    proxy = start_proxy(upstream.url, policy=str(_policy_file(tmp_path, REPAIRS)))
    written = f"cd docs && timeout 30 {ALLOWED} | tail -3"
    upstream.script(Reply(tool_calls=[("exec_command", {"cmd": written, "shell": "bash"})]))
    body = {"model": MODEL, "input": [{"type": "message", "role": "user", "content": "find rust async docs"}],
            "tools": client["tools"], "stream": stream}
    with proxy.client() as http:
        response = http.post("/v1/responses", json=body, headers={"user-agent": client["user_agent"]})
    assert [(c["name"], c["arguments"]) for c in responses_calls(response.content, stream)] == [
        ("exec_command", {"cmd": ALLOWED, "shell": "bash", "workdir": "docs"})]
    assert b"| tail" not in response.content and b"timeout 30" not in response.content
    assert len(upstream.requests) == 1
    if stream:
        assert_valid_stream("responses", response.content)
    (row,) = proxy.rows("SELECT tool_name, decision, command, repaired_command FROM tool_calls")
    assert tuple(row) == ("exec_command", "repaired", written, ALLOWED)


@pytest.mark.parametrize(("tool", "arguments", "repaired"), [
    ("Bash", {"command": f"{ALLOWED} | head -5"}, {"command": ALLOWED}),
    ("Bash", {"command": f"cd docs && {ALLOWED}"}, None),  # Claude Code's Bash has no workdir argument
    ("exec_command", {"cmd": f"timeout 30 {ALLOWED}", "shell": "bash"}, {"cmd": ALLOWED, "shell": "bash"}),
    ("exec_command", {"cmd": f"bash -lc '{ALLOWED} | head -5'"}, None),  # a wrapper written as one string
    ("run_shell_command", {"command": f"cd docs && {ALLOWED} 2>&1"}, {"command": ALLOWED, "directory": "docs"}),
    # An argv through a shell keeps its wrapper; the script inside is repaired.
    ("shell", {"command": ["bash", "-lc", f"{ALLOWED} | head -5"], "workdir": "src"},
     {"command": ["bash", "-lc", ALLOWED], "workdir": "src"}),
    ("shell", {"command": ["bash", "-lc", f"cd docs && {ALLOWED}"]}, {"command": ["bash", "-lc", ALLOWED],
                                                                      "workdir": "docs"}),
    ("shell", {"command": ["uv", "run", "scripts/search.py", "x", "|", "head"]}, None),  # a plain argv: no pipe
    ("run_commands", {"commands": [f"{ALLOWED} | head -5"]}, None),  # a list of commands is not rewritten
    ("my_runner", {"command": f"{ALLOWED} | head -5"}, None),  # a shell only the heuristic guesses
    ("shell", {"command": ["bash", "-lc", f"cd /tmp && {ALLOWED}"]}, None),  # the workdir leaves the project
])
def test_profiled_shells_are_repaired_in_their_own_argument_shape(tmp_path, tool, arguments, repaired):
    policy = load_policy_file(_policy_file(tmp_path, REPAIRS)).policy
    fix = repair_call(policy, tool, arguments)
    assert (fix.arguments if fix else None) == repaired


@pytest.mark.parametrize("route", ["responses", "messages"])
def test_a_retry_repaired_on_a_dialect_stream_goes_out_with_its_narration(upstream, start_proxy, tmp_path, route):
    """The repaired retry's call goes out with its text, then the line that says what was refused."""
    proxy = start_proxy(upstream.url, policy=str(_policy_file(tmp_path, REPAIRS)))
    upstream.script(Reply(content="Fetching. ", tool_calls=[("bash", {"command": "curl -s https://example.com"})]),
                    Reply(content="Searching. ", tool_calls=[("bash", {"command": f"{ALLOWED} | head -5"})]))
    response = ask(proxy, route, stream=True)
    _, _, calls, text = ROUTES[route]
    assert text(response.content, True) == ("Fetching. Searching. \n\nallowlist-proxy refused in this turn: "
                                            "`curl -s https://example.com` (program).")
    assert [c["arguments"] for c in calls(response.content, True)] == [{"command": ALLOWED}]
    assert b"head -5" not in response.content
    assert_valid_stream(route, response.content)
    rows = proxy.rows("SELECT attempt, decision, delivered FROM tool_calls ORDER BY attempt")
    assert [tuple(r) for r in rows] == [(1, "reject", 0), (2, "repaired", 1)]
