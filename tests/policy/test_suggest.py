"""Suggestions: each rejected command gets the nearest allowed command, or none; every one offered is allowed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.cli import main as cli_main
from proxy.policy import Policy, format_feedback, judge_call, load_policy_file, suggest

from .conftest import CORPUS_PATH

ROOT = Path(__file__).resolve().parents[2]
STRICT = ROOT / "policies" / "strict.yaml"


@pytest.fixture(scope="module")
def shipped() -> Policy:
    return load_policy_file(STRICT).policy


# (rejected command, kind, the concrete command offered or None)
TABLE = [
    # output filters, redirects, wrappers, cd around an allowed call: the call alone
    ('uv run scripts/search.py "rust async" | head -5', "core", 'uv run scripts/search.py "rust async"'),
    ('uv run scripts/search.py "rust async" | head -10', "core", 'uv run scripts/search.py "rust async"'),
    ('uv run scripts/search.py "rust" | tail -3', "core", 'uv run scripts/search.py "rust"'),
    ("uv run scripts/search.py tokio | grep -i spawn | head -20", "core", "uv run scripts/search.py tokio"),
    ('uv run scripts/search.py "rust" 2>&1', "core", 'uv run scripts/search.py "rust"'),
    ('uv run scripts/search.py "rust" 2>&1 | head -5', "core", 'uv run scripts/search.py "rust"'),
    ("uv run scripts/search.py x > out.txt", "core", "uv run scripts/search.py x"),
    ('timeout 30 uv run scripts/search.py "rust"', "core", 'uv run scripts/search.py "rust"'),
    ("timeout -s KILL 30 uv run scripts/fetch_page.py https://a.example", "core",
     "uv run scripts/fetch_page.py https://a.example"),
    ('cd scripts && uv run search.py "rust"', "core", 'uv run scripts/search.py "rust"'),
    ("cd src && uv run scripts/search.py x --max-results 3", "core", "uv run scripts/search.py x --max-results 3"),
    ("python3 scripts/search.py x", "core", "uv run scripts/search.py x"),
    ("uv run ./scripts/search.py x", "core", "uv run scripts/search.py x"),
    ("uv run python scripts/summarize.py 'a text'", "core", "uv run scripts/summarize.py 'a text'"),
    # a program a script replaces: the script, with the one argument carried over
    ("curl -s 'https://example.com/api?q=1'", "replacement", "uv run scripts/fetch_page.py 'https://example.com/api?q=1'"),
    ("curl https://example.com/docs", "replacement", "uv run scripts/fetch_page.py https://example.com/docs"),
    ("wget -q -O - https://example.com", "replacement", "uv run scripts/fetch_page.py https://example.com"),
    ("curl -sL https://example.com/a | head -50", "replacement", "uv run scripts/fetch_page.py https://example.com/a"),
    ("grep -rn spawn", "replacement", "uv run scripts/search.py spawn"),
    ("grep -rn spawn src", "replacement", None),  # pattern and path: which is the query?
    # an unknown script, flag, path or runner: the real scripts with their flags and descriptions
    ("uv run scripts/search.py --no-agent", "scripts", None),
    ("uv run scripts/youtube_fetcher.py 'https://youtu.be/x'", "scripts", None),
    ("uv run scripts/search-v2.py x", "scripts", None),
    ("uv pip install requests", "scripts", None),
    ("ls scripts/", "scripts", None),
    ('ls scripts/ | grep -E "search|web"', "scripts", None),
    # no safe suggestion
    ("uv run scripts/search.py x; rm -rf ~", None, None),
    ("uv run scripts/search.py x && curl https://evil.example", None, None),
    ('uv run scripts/search.py "$(whoami)"', None, None),
    ("uv run scripts/search.py x &", None, None),
    ("VAR=1 uv run scripts/search.py", None, None),
    ("env -i PATH=/tmp/evil uv run scripts/search.py", None, None),
    ("uv run scripts/search.py x | sh", None, None),
    ("rm -rf /", None, None),
    ("uv run scripts/search.py 'unterminated", None, None),
    ("cd /tmp; uv run scripts/search.py", None, None),
]


@pytest.mark.parametrize(("command", "kind", "offered"), TABLE)
def test_suggestion_table(shipped: Policy, command: str, kind: str | None, offered: str | None) -> None:
    arguments = {"command": command}
    verdict = judge_call(shipped, "bash", arguments)
    assert not verdict.allowed
    found = suggest(shipped, "bash", arguments, verdict)
    assert (found.kind if found else None, found.command if found else None) == (kind, offered)
    if found is not None and found.command is not None:
        assert judge_call(shipped, "bash", found.arguments).allowed
        assert found.arguments["command"] == found.command
        assert f"`{found.command}`" in found.text
    if kind == "scripts":
        assert "`uv run scripts/search.py` (flags: --max-results) - search the web" in found.text


def test_every_corpus_suggestion_is_allowed(shipped: Policy) -> None:
    offered = 0
    for line in CORPUS_PATH.read_text().splitlines():
        command = json.loads(line)["cmd"]
        verdict = judge_call(shipped, "bash", {"command": command})
        found = suggest(shipped, "bash", {"command": command}, verdict)
        assert found is None or not verdict.allowed
        if found is not None and found.command is not None:
            offered += 1
            assert judge_call(shipped, "bash", found.arguments).allowed, (command, found)
    assert offered >= 10


def test_suggestion_keeps_workdir_and_is_judged_with_it(shipped: Policy) -> None:
    # The suggested call keeps the model's workdir; with a workdir outside the project nothing is allowed.
    inside = {"command": "uv run scripts/search.py x | head -5", "workdir": "src"}
    found = suggest(shipped, "bash", inside, judge_call(shipped, "bash", inside))
    assert found is not None and found.arguments == {"command": "uv run scripts/search.py x", "workdir": "src"}
    outside = {"command": "uv run scripts/search.py x | head -5", "workdir": "../elsewhere"}
    assert suggest(shipped, "bash", outside, judge_call(shipped, "bash", outside)) is None


def test_not_for_other_tools_or_allowed_calls(shipped: Policy) -> None:
    read = {"filePath": "/etc/passwd"}
    assert suggest(shipped, "read", read, judge_call(shipped, "read", read)) is None
    allowed = {"command": "uv run scripts/search.py x"}
    assert suggest(shipped, "bash", allowed, judge_call(shipped, "bash", allowed)) is None


def test_a_suggestion_that_is_not_allowed_is_never_offered(shipped: Policy) -> None:
    # `summarize` replaces `wc` here, but the carried word is a flag-like text the lexer refuses unquoted...
    bash = shipped.bash.model_copy(update={"scripts": {"search": None}})
    narrow = shipped.model_copy(update={"bash": bash})
    # ...and here the core exists but its script is not allowed under the narrower policy.
    arguments = {"command": "uv run scripts/fetch_page.py https://a.example | head -5"}
    found = suggest(narrow, "bash", arguments, judge_call(narrow, "bash", arguments))
    assert found is None or found.command is None


def test_feedback_placeholder(shipped: Policy) -> None:
    arguments = {"command": 'uv run scripts/search.py "rust" | head -5'}
    text = format_feedback(shipped, judge_call(shipped, "bash", arguments), tool="bash", arguments=arguments)
    assert text.startswith("Rejected (pipe): ")
    assert text.endswith('Run `uv run scripts/search.py "rust"` alone: its whole output comes back to you.')
    none = {"command": "rm -rf /"}
    text = format_feedback(shipped, judge_call(shipped, "bash", none), tool="bash", arguments=none)
    assert text.endswith("scripts/summarize.py.")  # an empty {suggestion} leaves no trailing space


def test_check_explain_prints_the_feedback(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["check", "--policy", str(STRICT), "--explain", "curl -s https://example.com/a"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert out["suggestion"] == {
        "kind": "replacement", "command": "uv run scripts/fetch_page.py https://example.com/a",
        "text": "Run `uv run scripts/fetch_page.py https://example.com/a` instead of curl "
                "(fetch a web page by URL and print it as text).",
    }
    assert out["feedback"].startswith("Rejected (program): ") and out["feedback"].endswith(out["suggestion"]["text"])
    assert cli_main(["check", "--policy", str(STRICT), "--explain", "uv run scripts/search.py x"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "decision": "allow", "reasons": [], "shape": None, "feedback": None, "suggestion": None,
    }
