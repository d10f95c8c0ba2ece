"""One judge: the proxy, `allowlist-proxy check` and `allowlist-proxy recheck` give each call of a table the
same verdict (the proxy records it; check judges the same calls from stdin; recheck judges the stored rows)."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
from typing import Any

import pytest

from proxy.cli import check
from proxy.cli.recheck import recheck
from proxy.policy import load_policy_file
from proxy.testing.characters import OPENCODE_TOOLS
from proxy.testing.scripted_upstream import Reply
from tests.conftest import ROOT, chat

pytestmark = pytest.mark.each_database

OBSERVE = ROOT / "policies" / "observe.yaml"  # observe mode: one attempt, every call recorded as judged

# (tool, arguments as the model wrote them: an object or raw text), all tools offered by the request.
CALLS: list[tuple[str, Any]] = [
    ("bash", {"command": 'uv run scripts/search.py "rust async"'}),
    ("bash", {"command": "uv run scripts/search.py x | head"}),
    ("bash", {"command": "cat /etc/passwd"}),
    ("bash", {"command": 3}),
    ("bash", '{"command": "uv run scripts/search.py x"'),
    ("bash", "[1, 2]"),
    ("bash", '{"command": "uv run scripts/search.py x", "timeout": NaN}'),
    ("read", {"filePath": "/etc/passwd"}),
    ("read", {"filePath": "src/main.py"}),
    ("write", {"filePath": "../outside.txt", "content": ""}),
    ("edit", {"filePath": 7, "oldString": "a", "newString": "b"}),
    ("webfetch", {"url": "https://example.com"}),
]


def _checked() -> list[tuple[str, list[str]]]:
    parser = argparse.ArgumentParser(prog="allowlist-proxy")
    check.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["check", "--policy", str(OBSERVE), "--jsonl"])
    lines = "".join(json.dumps({"tool": tool, "arguments": arguments}) + "\n" for tool, arguments in CALLS)
    out = io.StringIO()
    assert args.func(args, stdin=io.StringIO(lines), stdout=out) == 0
    return [(v["decision"], v["reasons"]) for v in map(json.loads, out.getvalue().splitlines())]


def test_proxy_check_and_recheck_agree(upstream, start_proxy):
    proxy = start_proxy(upstream.url, policy=OBSERVE)
    upstream.script(Reply(tool_calls=CALLS))
    with proxy.client() as client:
        webfetch = {"type": "function", "function": {"name": "webfetch", "parameters": {"type": "object"}}}
        body = chat([{"role": "user", "content": "go"}], tools=[*OPENCODE_TOOLS, webfetch])
        assert client.post("/v1/chat/completions", json=body).status_code == 200
    rows = proxy.rows("SELECT tool_name, arguments_raw, decision, reasons FROM tool_calls")
    assert len(rows) == len(CALLS)
    by_call = {(r["tool_name"], r["arguments_raw"]): (r["decision"], [x for x in r["reasons"].split(",") if x])
               for r in rows}
    recorded = [by_call[tool, a if isinstance(a, str) else json.dumps(a, ensure_ascii=False)] for tool, a in CALLS]
    assert {d for d, _ in recorded} == {"allow", "reject", "malformed"}  # the table covers every decision

    assert _checked() == recorded

    loaded = load_policy_file(OBSERVE)
    result = asyncio.run_coroutine_threadsafe(recheck(proxy.services.engine, loaded),
                                              proxy.app.state.loop).result(30)
    assert sum(m.tool_calls for m in result.models.values()) == len(CALLS)
    assert (result.changed_total, result.changes) == (0, [])


def test_an_unoffered_tool_with_bad_arguments_is_judged_alike():
    from proxy.enforce.judging import judge_calls
    from proxy.policy import judge_call
    from proxy.toolcalls.openai import structured_call

    loaded = load_policy_file(OBSERVE)
    (proxy,) = judge_calls(loaded, [structured_call(name="nope", arguments="{", call_id=None, index=0)], {"bash"})
    policy = judge_call(loaded.policy, "nope", None, offered_tools={"bash"})
    assert proxy.verdict == policy
    assert (policy.decision, policy.reasons) == ("malformed", ("bad_arguments", "unknown_tool"))
