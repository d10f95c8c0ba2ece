"""Secrets are not readable by default (issue 24): every read capability, including the ones that read a
file's content without naming it as a path: a grep whose `include` glob selects secret files prints their
lines (`grep {pattern: ".", include: "*.pem"}` prints a private key whole). Filter globs (the profile
key `globs`) are judged by what they could select; a directory search (`searches`) by the protected files
on disk below it that its filter selects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.policy import Policy, judge_call, load_policy_file
from proxy.policy.tools.profiles import ToolSet

from .conftest import ROOT

CLIENTS = Path(__file__).parent / "client_tools"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy_file(ROOT / "policies" / "strict.yaml").policy


def _judge(policy: Policy, client: str, tool: str, arguments: dict[str, Any]) -> tuple[str, ...]:
    catalogue = json.loads((CLIENTS / f"{client}.json").read_text())
    tools = ToolSet.for_request(policy, {"model": "m", "tools": catalogue["tools"]},
                                {"user-agent": catalogue["user_agent"]})
    return judge_call(policy, tool, arguments, offered_tools=set(tools.offered or {}), tools=tools).reasons


# Globs that select a secret file by its name: each one a grep would read the content of.
SECRET_INCLUDES = [".env", "*.env", ".env.*", "*.pem", "**/*.key", "id_rsa*", "{*.pem,*.txt}", "*.{pem,txt}",
                   ".e?v", ".en[v]", "**/.aws/credentials", ".netrc"]
# Cloud credential files kept inside a project under their tool's file name.
CREDENTIAL_FILES = ["application_default_credentials.json", "deploy/.pgpass", ".vault-token", "certs/client.p12",
                    "sign.pfx"]


@pytest.mark.parametrize("include", SECRET_INCLUDES)
def test_a_grep_whose_include_selects_secrets_is_refused(policy: Policy, include: str) -> None:
    assert "protected_path" in _judge(policy, "opencode", "grep", {"pattern": ".", "include": include})


@pytest.mark.parametrize("include", ["*.py", "*.{md,txt}", "src/**/*.ts"])
def test_a_grep_over_ordinary_files_passes(policy: Policy, include: str) -> None:
    assert _judge(policy, "opencode", "grep", {"pattern": ".", "include": include}) == ()


@pytest.mark.parametrize("path", CREDENTIAL_FILES)
def test_a_cloud_credential_file_is_not_read(policy: Policy, path: str) -> None:
    assert "protected_path" in _judge(policy, "opencode", "read", {"filePath": path})


# Each client's filter argument, offered as the client offers its tools (captured catalogues).
CLIENT_FILTERS = [("opencode", "grep", "include", {"pattern": "."}), ("opencode", "glob", "pattern", {}),
                  ("kilo", "grep", "include", {"pattern": "."}), ("kilo", "glob", "pattern", {}),
                  ("qwen-code", "grep_search", "glob", {"pattern": "."}), ("qwen-code", "glob", "pattern", {}),
                  ("continue", "Search", "file_pattern", {"pattern": "."}),
                  ("langchain", "file_search", "pattern", {"dir_path": "."})]


@pytest.mark.parametrize(("client", "tool", "argument", "other"), CLIENT_FILTERS)
@pytest.mark.parametrize("glob", ["*.env", "{.env,x}", "**/.env*", "**/id_rsa*", "*.p12"])
def test_each_clients_filter_that_selects_secrets_is_refused(policy: Policy, client: str, tool: str, argument: str,
                                                             other: dict[str, Any], glob: str) -> None:
    assert _judge(policy, client, tool, {**other, argument: glob}) == ("protected_path",)
    assert _judge(policy, client, tool, {**other, argument: "**/*.py"}) == ()
