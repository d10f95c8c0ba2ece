"""Issue 38: the protected read list holds the secrets agents were seen to read, a search that targets or enters
`node_modules/`, `.git/` or `.git/modules/` is judged like any other directory, and a script argument that names a
protected read is refused (`protected_path`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from proxy.policy.judge import judge_call
from proxy.policy.schema import Policy
from tests.conftest import ROOT

STRICT = Policy.model_validate(yaml.safe_load((ROOT / "policies" / "strict.yaml").read_text()))

SECRET_FILES = [
    ".envrc", "terraform.tfvars", "prod.auto.tfvars", "infra/vars.tfvars.json", ".dev.vars", "secrets.yaml",
    "deploy/secrets.yml", "config/app.secrets.json", ".envs/.production/.django", "kubeconfig", "kubeconfig.yaml",
    ".kube/config", "_netrc", ".netrc", ".git/config", ".git/modules/lib/config", ".git/modules/a/modules/b/config",
    ".codex/auth.json", ".claude/.credentials.json", ".local/share/opencode/auth.json", ".config/gh/hosts.yml",
    ".docker/config.json", ".npmrc", ".pypirc", ".aws/credentials", ".azure/accessTokens.json",
    ".config/gcloud/application_default_credentials.json", ".gcloud/credentials.db", ".gemini/oauth_creds.json",
    ".qwen/oauth_creds.json", ".yarnrc.yml", ".m2/settings.xml", ".gradle/gradle.properties",
]
ORDINARY_FILES = ["src/secrets_helper.py", "docs/terraform.md", "src/kube.py", "netrc.md", "src/envrc.py",
                  "tests/test_secrets.py", ".github/workflows/ci.yml", "node_modules/pkg/index.js"]


@pytest.mark.parametrize("path", SECRET_FILES)
def test_a_secret_file_is_a_protected_read(path: str) -> None:
    verdict = judge_call(STRICT, "read", {"filePath": path})
    assert not verdict.allowed and verdict.reasons[0] == "protected_path", (path, verdict)


@pytest.mark.parametrize("path", ORDINARY_FILES)
def test_an_ordinary_file_is_read(path: str) -> None:
    assert judge_call(STRICT, "read", {"filePath": path}).allowed, path


@pytest.mark.parametrize("argument", [".env", ".git/config", "terraform.tfvars", ".envs/.production/.django",
                                      "./.env", "config/../.env", "kubeconfig.yaml"])
def test_a_script_argument_naming_a_protected_read_is_refused(argument: str) -> None:
    verdict = judge_call(STRICT, "bash", {"command": f"uv run scripts/summarize.py {argument}"})
    assert not verdict.allowed and "protected_path" in verdict.reasons, (argument, verdict)


@pytest.mark.parametrize("argument", ["src/app.py", '"rust async"', "README.md", '"how to load a .env file"',
                                      "--max-results=5"])
def test_other_script_arguments_pass(argument: str) -> None:
    assert judge_call(STRICT, "bash", {"command": f"uv run scripts/search.py {argument}"}).allowed, argument


def _project(tmp_path: Path, files: list[str]) -> Policy:
    project = tmp_path / "project"
    for name in files:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("x")
    text = (ROOT / "policies" / "strict.yaml").read_text().replace("  project_root: []",
                                                                    f"  project_root: [{project}]", 1)
    return Policy.model_validate(yaml.safe_load(text))


def test_a_search_entering_node_modules_or_git_is_judged_like_any_directory(tmp_path: Path) -> None:
    policy = _project(tmp_path, ["src/app.py", "node_modules/pkg/.env", "node_modules/pkg/index.js",
                                 ".git/HEAD", ".git/config", ".git/modules/lib/config", "vendor/.git/config"])
    refused = [{"pattern": "TOKEN", "path": "node_modules"}, {"pattern": "TOKEN", "path": "node_modules/pkg"},
               {"pattern": "TOKEN", "path": ".git"}, {"pattern": "TOKEN", "path": ".git/modules"},
               {"pattern": "TOKEN", "path": ".git/modules/lib"}, {"pattern": "TOKEN", "path": "vendor/.git"},
               {"pattern": "TOKEN", "path": ".", "include": "node_modules/**"}]
    for arguments in refused:
        verdict = judge_call(policy, "grep", arguments)
        assert not verdict.allowed and verdict.reasons[0] == "protected_path", (arguments, verdict)
    # From above, as the agents' search tools do, the listing still leaves them out.
    for arguments in [{"pattern": "TOKEN", "path": "."}, {"pattern": "TOKEN", "path": "src"},
                      {"pattern": "TOKEN", "path": "node_modules", "include": "*.js"}]:
        assert judge_call(policy, "grep", arguments).allowed, arguments
