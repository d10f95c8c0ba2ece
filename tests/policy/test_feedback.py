"""format_feedback fills the template and never raises, whatever the template holds."""

from __future__ import annotations

import pytest

from proxy.policy import Policy, format_feedback, judge_call


def test_design_template(policy: Policy) -> None:
    arguments = {"command": "uv run scripts/search.py | head -5"}
    text = format_feedback(policy, judge_call(policy, "bash", arguments), tool="bash", arguments=arguments)
    assert text == (
        "Rejected (pipe): only `uv run scripts/<name>.py [args]` may run. Scripts: "
        "scripts/fetch_page.py, scripts/search.py [--max-results], scripts/summarize.py."
    )


@pytest.mark.parametrize(
    "template",
    ["{", "}", "{0}", "{reasons.__class__}", "{unknown}", "%s {reasons!r}", "{{reasons}}", "", "{command}{command}"],
)
def test_odd_templates_never_raise(policy: Policy, template: str) -> None:
    odd = policy.model_copy(update={"feedback": template})
    verdict = judge_call(odd, "read", {"filePath": "/x"})
    text = format_feedback(odd, verdict, tool="read", arguments={"filePath": "/x"})
    assert isinstance(text, str)
    assert "__class__" not in text or template == "{reasons.__class__}"


def test_command_and_extras(policy: Policy) -> None:
    odd = policy.model_copy(update={"feedback": "{tool}|{command}|{shape}|{hint}|{decision}"})
    verdict = judge_call(odd, "read", {"filePath": "/etc/passwd"})
    text = format_feedback(odd, verdict, tool="read", arguments={"filePath": "/etc/passwd"})
    tool, command, shape, hint, decision = text.split("|")
    assert (tool, shape, decision) == ("read", "absolute_path:read.filePath", "reject")
    assert '"/etc/passwd"' in command and "relative" in hint
    long = {"command": "x" * 5000}
    text = format_feedback(odd, judge_call(odd, "bash", long), tool="bash", arguments=long)
    assert len(text) < 1000
    assert format_feedback(odd, judge_call(odd, "bash", None), tool="bash", arguments=None).startswith("bash|null|")
