"""The public names other modules rely on (pinned, so a rename fails here first)."""

from __future__ import annotations

import inspect

import proxy.policy as policy_package
from proxy.policy.reasons import PRIMARY_ORDER, REASON_CODES

PUBLIC = {
    "Policy", "LoadedPolicy", "PolicyError", "PolicyManager", "load_policy_file", "judge_command", "judge_call",
    "format_feedback", "default_policy_path",
}  # fmt: skip
DESIGN_CODES = {
    "pipe", "redirect", "chain", "cd", "wrapper", "substitution", "background", "subshell", "expansion",
    "assignment", "obfuscation", "unsafe_text", "comment", "parse_error", "empty", "program", "runner",
    "unknown_script", "script_path", "flag", "absolute_path", "path_escape", "unknown_tool", "bad_arguments",
    "unjudgeable", "argument", "url", "protected_path",
}  # fmt: skip


def test_public_names() -> None:
    assert set(policy_package.__all__) >= PUBLIC
    for name in policy_package.__all__:
        assert hasattr(policy_package, name)


def test_signatures() -> None:
    assert list(inspect.signature(policy_package.judge_call).parameters) == [
        "policy",
        "tool",
        "arguments",
        "offered_tools",
        "tools",
    ]
    assert list(inspect.signature(policy_package.format_feedback).parameters) == [
        "policy",
        "verdict",
        "tool",
        "arguments",
        "variant",
        "unrooted",
    ]
    manager = policy_package.PolicyManager
    for method in ("current", "get", "reload", "start", "stop", "status"):
        assert callable(getattr(manager, method))
    assert inspect.iscoroutinefunction(manager.start) and inspect.iscoroutinefunction(manager.stop)


def test_reason_codes_are_designs() -> None:
    assert set(REASON_CODES) == DESIGN_CODES
    assert len(PRIMARY_ORDER) == len(DESIGN_CODES)


def test_docs_name_every_reason_code() -> None:
    from .conftest import ROOT

    doc = (ROOT / "docs" / "policy.md").read_text()
    missing = [code for code in sorted(DESIGN_CODES) if f"`{code}`" not in doc]
    assert not missing, f"docs/policy.md does not describe {missing}"
