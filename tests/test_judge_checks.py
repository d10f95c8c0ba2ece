"""A new check on a tool call is one module in its room and one line in `CHECKS` (docs/DESIGN.md, "Where to
change what"): a toy check added that way judges every governed call, through the one entry point, with nothing
else changed; and the shipped checks are the ones the rooms offer, in the order whose first shape wins."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from proxy.policy import judge as judge_module
from proxy.policy import judge_call, load_policy_file
from proxy.policy.call import BadArguments, Call, Finding
from proxy.policy.reasons import REASON_CODES
from tests.conftest import ROOT

POLICY = load_policy_file(ROOT / "policies" / "strict.yaml").policy

TOY_MODULE = '''
"""A toy check: no tool may write a file whose name ends in `.toy`."""
from proxy.policy.call import Call, Finding, strings


def toy_findings(call: Call):
    for spec in call.map.paths:
        for label, value in call.values(spec):
            for path in strings(value):
                if path.endswith(".toy"):
                    yield call.found("protected_path", label)
'''


@pytest.fixture
def toy_check(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    module = types.ModuleType("proxy.policy.paths.toy")
    exec(compile(TOY_MODULE, "proxy/policy/paths/toy.py", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(judge_module, "CHECKS", [*judge_module.CHECKS, module.toy_findings])  # the one line
    yield


def test_a_toy_check_judges_every_governed_call(toy_check: None) -> None:
    verdict = judge_call(POLICY, "write", {"filePath": "notes.toy", "content": "x"})
    assert (verdict.decision, verdict.reasons, verdict.shape) == ("reject", ("protected_path",),
                                                                   "protected_path:write.filePath")
    # The same tool and value elsewhere pass: the toy check found nothing, the shipped ones neither.
    assert judge_call(POLICY, "write", {"filePath": "notes.txt", "content": "x"}).allowed
    # Other capabilities' calls go through it too, and it adds its reason beside theirs.
    both = judge_call(POLICY, "edit", {"filePath": "/etc/x.toy", "oldString": "a", "newString": "b"})
    assert both.decision == "reject" and set(both.reasons) == {"absolute_path", "protected_path"}


def test_a_check_that_finds_bad_arguments_makes_the_call_malformed(monkeypatch: pytest.MonkeyPatch) -> None:
    def picky(call: Call) -> Iterator[Finding]:
        raise BadArguments
        yield  # a generator, as the shipped checks are

    monkeypatch.setattr(judge_module, "CHECKS", [*judge_module.CHECKS, picky])
    verdict = judge_call(POLICY, "write", {"filePath": "notes.txt", "content": "x"})
    assert (verdict.decision, verdict.reasons) == ("malformed", ("bad_arguments",))


def test_a_check_that_breaks_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(call: Call) -> Iterator[Finding]:
        raise RuntimeError("a bug in a new check")
        yield

    monkeypatch.setattr(judge_module, "CHECKS", [*judge_module.CHECKS, broken])
    verdict = judge_call(POLICY, "write", {"filePath": "notes.txt", "content": "x"})
    assert verdict.decision == "reject" and verdict.reasons == ("parse_error",)


def test_the_shipped_checks_come_from_their_rooms_in_order() -> None:
    rooms = [f"{check.__module__}.{check.__name__}" for check in judge_module.CHECKS]
    assert rooms == ["proxy.policy.shell.calls.shell_findings", "proxy.policy.shell.keyboard.keyboard_findings",
                     "proxy.policy.paths.calls.path_findings",
                     "proxy.policy.paths.calls.search_findings", "proxy.policy.urls.calls.url_findings",
                     "proxy.policy.paths.calls.patch_findings"]
    # A command's shape outranks a path problem's, whichever check found it first.
    verdict = judge_call(POLICY, "bash", {"command": "cat x | head", "workdir": "/etc"})
    assert verdict.shape == "pipe" and {"pipe", "absolute_path"} <= set(verdict.reasons)


def test_every_reason_a_check_can_give_is_a_stable_code() -> None:
    assert "protected_path" in REASON_CODES and "bad_arguments" in REASON_CODES
