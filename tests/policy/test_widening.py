"""The structural widening check (proxy/policy/file/widening.py): each kind of edit read by its meaning, and
every edit the sample-call probes of a reload miss (a metadata host allowed, `file:` URLs, a scripts dir
listed, repairs on, a client's shell tool mapped to nothing) reported as widening."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from proxy.policy import Policy
from proxy.policy.file.widening import widenings

from .conftest import ROOT

BASE: dict[str, Any] = yaml.safe_load((ROOT / "policies" / "strict.yaml").read_text())


def _policy(edit: Callable[[dict[str, Any]], object] | None = None) -> Policy:
    data = copy.deepcopy(BASE)
    if edit is not None:
        edit(data)
    return Policy.model_validate(data)


SERVED = _policy()

WIDEN: dict[str, Callable[[dict[str, Any]], object]] = {
    "metadata host allowed": lambda d: d.setdefault("urls", {}).update(allow_hosts=["169.254.169.254"]),
    "file scheme": lambda d: d.setdefault("urls", {}).update(schemes=["http", "https", "file"]),
    "deny host dropped": lambda d: None,  # filled below from a served deny list
    "project root added": lambda d: d["paths"].update(project_root=["/srv/other"]),
    "scripts dir listed": lambda d: d["shell"].update(scripts_path="/tmp"),
    "scripts dir moved": lambda d: d["shell"].update(scripts_dir="tmp"),
    "script added": lambda d: d["shell"]["scripts"].update(evil={}),
    "flag added": lambda d: d["shell"]["scripts"]["search"].update(flags=["--max-results", "--exec"]),
    "argument rule": lambda d: d["shell"]["scripts"]["search"].update(args={"positional": {"regex": ".*"}}),
    "repairs on": lambda d: d.update(repair=["timeout"]),
    "passthrough added": lambda d: d.update(passthrough_routes=[*d["passthrough_routes"], "/v1/audio"]),
    "observe": lambda d: d.update(mode="observe"),
    "shell tool mapped to nothing": lambda d: d.update(
        profiles={"opencode": {"user_agent": "opencode", "tools": {"bash": {}}}}),
    "built-in profiles off": lambda d: d.update(builtin_profiles=False),
    "longer commands": lambda d: d["shell"].update(max_command_length=4000),
    "command argument renamed": lambda d: d["shell"].update(command_argument="cmd"),
    # What the statistics count, either way (issue 38): raised, a live reload would empty the loop figures.
    "loops counted later": lambda d: d.update(loop_min_attempts=100),
    "loops counted sooner": lambda d: d.update(loop_min_attempts=2),
    "a new module allowed": lambda d: d.setdefault("protected", {}).setdefault("new_modules", {}).update(
        allow=["mypkg"]),
}
NARROW_OR_TEXT: dict[str, Callable[[dict[str, Any]], object]] = {
    "script removed": lambda d: d["shell"]["scripts"].pop("summarize"),
    "other tools refused": lambda d: d.update(other_tools="reject"),
    "deny host added": lambda d: d.setdefault("urls", {}).update(deny_hosts=["example.com"]),
    "passthrough removed": lambda d: d.update(passthrough_routes=["/v1/models"]),
    "feedback text": lambda d: d.update(feedback={"shell": "No: {reasons}"}),
    "retry budget": lambda d: d.update(retry_budget=1),
    "script description": lambda d: d["shell"]["scripts"]["search"].update(description="find things"),
    "shorter commands": lambda d: d["shell"].update(max_command_length=500),
    "examples": lambda d: d.update(examples={"allow": [], "reject": []}),
}


@pytest.mark.parametrize("edit", sorted(WIDEN))
def test_an_edit_that_allows_more_is_a_widening(edit: str) -> None:
    if edit == "deny host dropped":
        served = _policy(lambda d: d.setdefault("urls", {}).update(deny_hosts=["evil.example"]))
        assert widenings(served, SERVED) == ["urls.deny_hosts: removed 'evil.example'"]
        return
    found = widenings(SERVED, _policy(WIDEN[edit]))
    assert found, edit


@pytest.mark.parametrize("edit", sorted(NARROW_OR_TEXT))
def test_an_edit_that_narrows_or_changes_text_is_not(edit: str) -> None:
    assert widenings(SERVED, _policy(NARROW_OR_TEXT[edit])) == [], edit


def test_a_change_of_what_the_statistics_count_says_so() -> None:
    assert widenings(SERVED, _policy(WIDEN["loops counted later"])) == [
        "loop_min_attempts: 3 -> 100 (changes what the statistics count)"]


def test_the_widening_says_what_moved() -> None:
    assert widenings(SERVED, _policy(WIDEN["metadata host allowed"])) == ["urls.allow_hosts: added '169.254.169.254'"]
    assert widenings(SERVED, _policy(WIDEN["observe"])) == ["mode: enforce -> observe"]
    assert widenings(SERVED, _policy(WIDEN["script added"])) == ["bash.scripts: added evil"]
    assert widenings(SERVED, SERVED) == []


def test_a_removed_flag_narrows() -> None:
    def two_flags(d: dict[str, Any]) -> None:
        d["shell"]["scripts"]["search"]["flags"].append("--lang")

    assert widenings(_policy(two_flags), SERVED) == []
    assert widenings(SERVED, _policy(two_flags)) == ["bash.scripts.search.flags: added '--lang'"]
