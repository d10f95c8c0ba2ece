"""The decision language, rule by rule: each test names one rule and fails if the rule is loosened."""

from __future__ import annotations

import pytest

from proxy.policy import Policy, judge_command, lex
from proxy.policy.shell.matcher import matcher_for


@pytest.mark.parametrize(
    ("text", "argv"),
    [
        ("a b", ["a", "b"]),
        ("  a   b  ", ["a", "b"]),
        ("a\"b c\"'d e'", ["ab cd e"]),
        ("'' \"\"", ["", ""]),
        ("x=y --a=b :x, @%+", ["x=y", "--a=b", ":x,", "@%+"]),
        ("a:=b :=x x=a:b=c k=v:w x=a''=b", ["a:=b", ":=x", "x=a:b=c", "k=v:w", "x=a=b"]),
        ('"a"=b', ["a=b"]),
        ("'$(id) `x` \\ !'", ["$(id) `x` \\ !"]),
        ('"~ * ? [ ] { } # ; & | < > ( ) ^ %"', ["~ * ? [ ] { } # ; & | < > ( ) ^ %"]),
        ('"café 東京"', ["café 東京"]),
        ("", []),
    ],
)
def test_lex_accepts(text: str, argv: list[str]) -> None:
    assert lex(text) == argv


@pytest.mark.parametrize(
    "text",
    [
        "=ls", "a =b", 'a ""=b', "a ''=b", "a ''\"\"=b",  # zsh =cmd, also after empty quotes
        "x==ls", "x=a:=ls", "x''==ls", "x=''=ls", "--q==1",  # ... and after = or := with MAGIC_EQUAL_SUBST
        "a\tb", "a\nb", "a\rb", "a\x00", "a\x1b[2K", "'a\nb'", '"a\tb"',  # control characters anywhere
        "é", "ｕv", "a\u00a0b", '"a\u200bb"', '"\u202e"', "'\ufeff'", '"\u2800"', '"\U000e0041"',  # Unicode
        "'a", '"a', "a'", '"a"b"',  # unbalanced quotes
        "'a''b'", "''''", "x'a''b'",  # touching single-quoted texts (zsh RC_QUOTES)
        '"$x"', '"`id`"', '"\\x"', '"hi!"',  # double quotes keep $, `, \, ! special
        "$x", "a~", "~", "*", "?", "[a]", "{a,b}", "a#b", "#", "a;b", "a&", "a|b", "a>b", "a<b", "(a)", "^a",
        "\\a", "a\\", "!a",
    ],
)  # fmt: skip
def test_lex_refuses(text: str) -> None:
    assert lex(text) is None


def test_length_cap() -> None:
    assert lex("a" * 2000) == ["a" * 2000]
    assert lex("a" * 2001) is None
    assert lex("a" * 50, max_length=49) is None


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("uv run scripts/search.py", True),
        ("uv run scripts/search.py --max-results 5", True),
        ("uv run scripts/search.py --max-results=5", True),
        ("uv run scripts/search.py '--max-results' 5", True),  # a quoted flag is the same flag
        ("uv run scripts/search.py --max-results -5", False),  # `-5` is a flag nobody declared
        ("uv run scripts/search.py --max", False),  # no prefix matching
        ("uv run scripts/search.py -- x", False),  # `--` only when declared
        ("uv run scripts/search.py -", False),
        ("uv run scripts/fetch_page.py --max-results 5", False),  # flags are per script
        ('uv run scripts/search.py "-x"', False),
        ('"uv" run scripts/search.py', False),
        ('uv "run" scripts/search.py', False),
        ('uv run "scripts/search.py"', False),
        ("uv run scripts/search.py''", False),  # script word must be unquoted, wholly
        ("uv run scripts/search.pyx", False),
        ("uv run scripts/Search.py", False),
        ("uv run scripts/search.py/", False),
        ("uv runx scripts/search.py", False),
        ("uvx run scripts/search.py", False),
        ("uv  run  scripts/search.py  x", True),
    ],
)
def test_policy_argv(policy: Policy, command: str, allowed: bool) -> None:
    assert (matcher_for(policy).argv(command) is not None) is allowed
    assert judge_command(policy, command).allowed is allowed


def test_dash_flag_declared(policy: Policy) -> None:
    custom = Policy.model_validate({"name": "t", "bash": {"scripts": {"s": {"flags": ["--", "-n"]}}}})
    assert judge_command(custom, "uv run scripts/s.py -- -n 3").allowed
    assert not judge_command(custom, "uv run scripts/s.py -- -m").allowed


def test_scripts_dir_is_configurable() -> None:
    custom = Policy.model_validate({"name": "t", "bash": {"scripts_dir": "tools/bin", "scripts": {"s": {}}}})
    assert judge_command(custom, "uv run tools/bin/s.py").allowed
    assert not judge_command(custom, "uv run scripts/s.py").allowed
    assert not judge_command(custom, "uv run toolsXbin/s.py").allowed  # the dir is literal, not a regex


def test_scripts_path_allows_existing_scripts(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "extra.py").write_text("")
    (scripts / "Mixed.py").write_text("")
    (scripts / "not-ident.py").write_text("")
    monkeypatch.chdir(tmp_path)
    custom = Policy.model_validate({"name": "t", "bash": {"scripts_path": "scripts", "scripts": {"listed": {}}}})
    assert judge_command(custom, "uv run scripts/extra.py x").allowed
    assert judge_command(custom, "uv run scripts/listed.py").allowed  # listed, even if absent
    assert judge_command(custom, "uv run scripts/Mixed.py").allowed
    assert not judge_command(custom, "uv run scripts/mixed.py").allowed  # exact case only
    assert not judge_command(custom, "uv run scripts/extra.py --flag").allowed  # unlisted: no flags
    missing = judge_command(custom, "uv run scripts/later.py")
    assert missing.reasons == ("unknown_script",) and missing.shape == "unknown_script:later"
    (scripts / "later.py").write_text("")
    import os

    os.utime(scripts, ns=(1, 10**18))  # make sure the directory's mtime moves even on coarse clocks
    assert judge_command(custom, "uv run scripts/later.py").allowed
