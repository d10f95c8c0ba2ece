"""format_feedback fills the template and never raises, whatever the template holds."""

from __future__ import annotations

import pytest

from proxy.policy import Policy, format_feedback, judge_call
from proxy.policy.schema import Feedback


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
    odd = policy.model_copy(update={"feedback": Feedback(shell=template, paths=template, other=template)})
    verdict = judge_call(odd, "read", {"filePath": "/x"})
    text = format_feedback(odd, verdict, tool="read", arguments={"filePath": "/x"})
    assert isinstance(text, str)
    assert "__class__" not in text or template == "{reasons.__class__}"


def test_command_and_extras(policy: Policy) -> None:
    template = "{tool}|{command}|{shape}|{hint}|{decision}"
    odd = policy.model_copy(update={"feedback": Feedback(shell=template, paths=template, other=template)})
    verdict = judge_call(odd, "read", {"filePath": "/etc/passwd"})
    text = format_feedback(odd, verdict, tool="read", arguments={"filePath": "/etc/passwd"})
    tool, command, shape, hint, decision = text.split("|")
    assert (tool, shape, decision) == ("read", "absolute_path:read.filePath", "reject")
    assert '"/etc/passwd"' in command and "relative" in hint
    long = {"command": "x" * 5000}
    text = format_feedback(odd, judge_call(odd, "bash", long), tool="bash", arguments=long)
    assert len(text) < 1000
    assert format_feedback(odd, judge_call(odd, "bash", None), tool="bash", arguments=None).startswith("bash|null|")


def test_feedback_per_capability(policy: Policy) -> None:
    """A rejected read is told about paths and names its tool; a blocked command gets the shell template."""
    read = {"file_path": "/etc/passwd"}
    text = format_feedback(policy, judge_call(policy, "Read", read), tool="Read", arguments=read)
    assert text == "Rejected (absolute_path): `Read` call refused. Use a path inside the project, relative to its root."
    assert "uv run" not in text
    shell = {"cmd": "uv run scripts/search.py x | head -5"}
    text = format_feedback(policy, judge_call(policy, "exec_command", shell), tool="exec_command", arguments=shell)
    assert text.startswith("Rejected (pipe): only `uv run")
    per = policy.model_copy(update={"feedback": Feedback(shell="S {tool} {command}", paths="P {tool}", other="O")})
    assert format_feedback(per, judge_call(per, "exec_command", shell), tool="exec_command",
                           arguments=shell) == "S exec_command uv run scripts/search.py x | head -5"
    assert format_feedback(per, judge_call(per, "Read", read), tool="Read", arguments=read) == "P Read"
    bad = judge_call(per, "Read", {"file_path": 3})
    assert format_feedback(per, bad, tool="Read", arguments={"file_path": 3}) == "O"


def test_shipped_feedback_names_the_tool_and_hints() -> None:
    from proxy.policy import load_policy_file

    from .conftest import ROOT

    shipped = load_policy_file(ROOT / "policies" / "strict.yaml").policy
    pipe = {"command": "uv run scripts/search.py x | head -5"}
    text = format_feedback(shipped, judge_call(shipped, "run_shell_command", pipe), tool="run_shell_command",
                           arguments=pipe)
    assert "`run_shell_command`" in text and "Do not pipe" in text and "scripts/search.py" in text
    read = {"file_path": "/etc/passwd"}
    text = format_feedback(shipped, judge_call(shipped, "read_file", read), tool="read_file", arguments=read)
    assert "`read_file`" in text and "inside the project" in text and "uv run" not in text


def test_blocked_message_shows_every_clients_command() -> None:
    """The text a client gets when the budget is spent shows the command, whatever the shell tool."""
    import json

    from proxy.enforce.feedback_turns import blocked_message
    from proxy.policy import load_policy_file
    from proxy.record import JudgedCall
    from proxy.toolcalls import ToolCall

    from .conftest import ROOT

    loaded = load_policy_file(ROOT / "policies" / "strict.yaml")
    arguments = {"cmd": "uv run scripts/search.py x | head -5", "workdir": "sub"}
    call = ToolCall("exec_command", json.dumps(arguments), arguments, "openai")
    text = blocked_message(loaded, [JudgedCall(call, judge_call(loaded.policy, call.name, arguments))], 4)
    assert "- `uv run scripts/search.py x | head -5` (pipe)" in text
    assert "Rejected (pipe): `exec_command` may only run" in text


def test_a_policy_without_feedback_tells_the_model_as_much_as_the_shipped_one(tmp_path) -> None:
    """One source: a policy that sets no `feedback:` reads exactly what the shipped policy gives, the hint and
    the nearest allowed command included (`curl -s URL` is pointed at `uv run scripts/fetch_page.py URL`)."""
    import yaml

    from proxy.policy import load_policy_file

    from .conftest import ROOT

    shipped = load_policy_file(ROOT / "policies" / "strict.yaml").policy
    data = yaml.safe_load((ROOT / "policies" / "strict.yaml").read_text())
    data.pop("feedback", None)
    data["feedback_variants"] = {}
    bare_file = tmp_path / "bare.yaml"
    bare_file.write_text(yaml.safe_dump({"name": "bare", "bash": data.get("bash") or data.get("shell")}))
    bare = load_policy_file(bare_file).policy
    cases = [("bash", {"command": "curl -s https://example.com/a"}), ("read", {"filePath": "/etc/passwd"}),
             ("bash", {"command": "uv run scripts/search.py x | head -5"}), ("bash", {"command": 3})]
    for tool, arguments in cases:
        texts = {format_feedback(p, judge_call(p, tool, arguments), tool=tool, arguments=arguments)
                 for p in (shipped, bare)}
        assert len(texts) == 1, texts
    curl = {"command": "curl -s https://example.com/a"}
    text = format_feedback(bare, judge_call(bare, "bash", curl), tool="bash", arguments=curl)
    assert "uv run scripts/fetch_page.py https://example.com/a" in text and "curl" in text


def test_a_path_judged_without_a_root_says_how_to_bind_the_project(policy: Policy) -> None:
    from proxy.policy.feedback.messages import UNROOTED

    verdict = judge_call(policy, "read", {"filePath": "/srv/app/a.txt"})
    told = format_feedback(policy, verdict, tool="read", arguments={"filePath": "/srv/app/a.txt"}, unrooted=True)
    assert told.count(UNROOTED) == 1 and "allowlist-proxy run" in told and "paths.project_root" in told
    assert UNROOTED not in format_feedback(policy, verdict, tool="read", arguments={"filePath": "/srv/app/a.txt"})
    # In `{hint}` where the template has one, after the text where it has none; never for a shell rejection.
    bare = policy.model_copy(update={"feedback": Feedback(paths="Rejected ({reasons}).")})
    assert format_feedback(bare, verdict, tool="read", arguments={}, unrooted=True).endswith(UNROOTED)
    piped = {"command": "uv run scripts/search.py | head -5"}
    assert UNROOTED not in format_feedback(policy, judge_call(policy, "bash", piped), tool="bash", arguments=piped,
                                           unrooted=True)
