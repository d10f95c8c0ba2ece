"""Reason codes and shapes of rejected commands, beyond the corpus."""

from __future__ import annotations

import pytest

from proxy.policy import Policy, judge_command
from proxy.policy.shell import explain as explain_module


@pytest.mark.parametrize(
    ("command", "reasons", "shape"),
    [
        ("uv run scripts/search.py | head -5", ("pipe",), "pipe"),
        ("curl -s https://example.com", ("program",), "program:curl"),
        ("timeout 30 uv run scripts/search.py", ("wrapper",), "wrapper:timeout"),
        ("/usr/bin/env uv run scripts/search.py", ("wrapper",), "wrapper:env"),
        ("cd scripts && uv run search.py", ("cd", "chain"), "cd"),
        ("uv run scripts/foo.py", ("unknown_script",), "unknown_script:foo"),
        ("uv run scripts/search.py --limit 3", ("flag",), "flag:search"),
        ("uv pip install x", ("runner",), "runner:pip"),
        ("uv run --with x scripts/search.py", ("runner",), "runner:--with"),
        ("uv run scripts/search.py x > out", ("redirect",), "redirect"),
        ("uv run scripts/search.py x &", ("background",), "background"),
        ('uv run scripts/search.py "$(id)"', ("substitution", "chain"), "substitution"),
        ("uv run scripts/search.py `id`", ("substitution", "chain"), "substitution"),
        ("uv run /tmp/x.py", ("script_path",), "script_path"),
        ('uv run "scripts/search.py"', ("obfuscation",), "obfuscation"),
        ('uv run scripts/search.py "hi!"', ("expansion",), "expansion"),
        ("uv run scripts/search.py @(a|b)", None, "expansion"),
        ("if true; then uv run scripts/search.py; fi", ("subshell", "chain"), "subshell"),
        ("export A=1; uv run scripts/search.py", ("chain", "assignment"), "chain"),
        ("uv run scripts/search.py x 2>&1 | tee log", ("pipe", "redirect"), "pipe"),
        ("cat <<'EOF' | uv run scripts/search.py\n$(id)\nEOF", ("pipe", "redirect", "chain"), "pipe"),
        ("uv run scripts/search.py x )", ("parse_error",), "parse_error"),
        ("uv run scripts/search.py x\\\ny", ("obfuscation",), "obfuscation"),
        ("   ", ("empty",), "empty"),
        ("uv run scripts/search.py " + "a" * 3000, ("unsafe_text",), "unsafe_text"),
        ('uv run scripts/search.py "a\u200bb"', ("unsafe_text",), "unsafe_text"),
    ],
)
def test_reasons_and_shape(policy: Policy, command: str, reasons: tuple[str, ...] | None, shape: str) -> None:
    verdict = judge_command(policy, command)
    assert verdict.decision == "reject"
    if reasons is not None:
        assert verdict.reasons == reasons
    assert verdict.shape == shape


@pytest.mark.parametrize(
    "variants",
    [
        [
            "uv run scripts/search.py | head -5",
            "uv run scripts/search.py x | head -10",
            "uv run scripts/search.py | tail -3",
        ],
        ["curl -s https://a.example", "curl https://b.example/x", "curl -L -o x https://c.example"],
        ["timeout 30 uv run scripts/search.py", "timeout 5 uv run scripts/search.py x"],
        ["uv run scripts/search.py --limit 3", "uv run scripts/search.py --verbose", 'uv run scripts/search.py "-n"'],
        ["uv run scripts/search.py $HOME", "uv run scripts/search.py ~/x", "uv run scripts/search.py *.py"],
    ],
)
def test_variants_share_a_shape(policy: Policy, variants: list[str]) -> None:
    shapes = {judge_command(policy, v).shape for v in variants}
    assert len(shapes) == 1, shapes


def test_different_forms_differ(policy: Policy) -> None:
    shapes = [judge_command(policy, c).shape for c in ("curl x", "wget x", "uv run scripts/search.py | head", "ls")]
    assert len(set(shapes)) == 4


def test_explanation_failure_is_parse_error(policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(_text: str) -> object:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(explain_module, "scan", boom)
    verdict = judge_command(policy, "uv run scripts/search.py | head")
    assert (verdict.decision, verdict.reasons, verdict.shape) == ("reject", ("parse_error",), "parse_error")
    # The decision does not depend on the explanation: allowed stays allowed.
    assert judge_command(policy, "uv run scripts/search.py x").allowed


def test_decision_failure_fails_closed(policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.policy.shell import decision as judge_module

    def boom(_policy: Policy) -> object:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(judge_module, "matcher_for", boom)
    verdict = judge_command(policy, "uv run scripts/search.py x")
    assert verdict.decision == "reject" and verdict.reasons == ("parse_error",)


def test_judging_from_many_threads(policy: Policy) -> None:
    # Requests are judged on the event loop while reloads self-test in a worker thread: the explanation's
    # tree-sitter parser must not be shared between threads.
    from concurrent.futures import ThreadPoolExecutor

    from .conftest import load_corpus

    commands = [case["cmd"] for case in load_corpus()] * 5
    expected = [judge_command(policy, c) for c in commands]
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(lambda c: judge_command(policy, c), commands))
    assert got == expected
