"""docs/policy.schema.json is what `allowlist-proxy policy schema` generates from the policy model; the shipped
policies name it in their first line; every policy file the loader accepts is valid against it, and a typo the
loader refuses is refused by it too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from proxy.policy.file.json_schema import SCHEMA_HEADER, policy_json_schema, render
from proxy.policy.file.loader import load_policy_file
from tests.conftest import ROOT

COMMITTED = ROOT / "docs" / "policy.schema.json"
SHIPPED = [*sorted((ROOT / "policies").glob("*.yaml")),
           *sorted(p for p in (ROOT / "proxy" / "default_policies").glob("*.yaml") if p.name != "tool-profiles.yaml")]
ACCEPTED = [*SHIPPED, ROOT / "tests" / "policy" / "strict_legacy_format.yaml"]


def _validator() -> jsonschema.protocols.Validator:
    schema = policy_json_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_the_committed_schema_is_the_generated_one():
    assert COMMITTED.read_text(encoding="utf-8") == render(), \
        "docs/policy.schema.json is stale: python -m proxy.policy.file.json_schema > docs/policy.schema.json"
    check = subprocess.run([sys.executable, "-m", "proxy.policy.file.json_schema", "--check", str(COMMITTED)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr


def test_the_check_names_a_stale_file(tmp_path: Path):
    stale = tmp_path / "policy.schema.json"
    stale.write_text(render().replace('"title"', '"titel"', 1))
    check = subprocess.run([sys.executable, "-m", "proxy.policy.file.json_schema", "--check", str(stale)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 1 and "stale" in check.stderr


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_shipped_policy_names_the_schema_for_editors(path: Path):
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first == SCHEMA_HEADER
    if path.parent.name == "policies":  # the repository's copy: the path resolves to the committed schema
        target = (path.parent / first.split("$schema=", 1)[1]).resolve()
        assert target == COMMITTED.resolve() and target.is_file()


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_policy_the_loader_accepts_is_valid_against_the_schema(path: Path):
    load_policy_file(path)
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in _validator().iter_errors(yaml.safe_load(
        path.read_text(encoding="utf-8")))]
    assert not errors, errors


@pytest.mark.parametrize("text", [
    "name: short\nbash: {scripts: {search: {}}}\npaths: {read: filePath, edit: [filePath, path]}\n",
    "name: roots\npaths: {project_root: /srv/project, tools: {read: filePath}}\n",
    "name: profile\nprofiles:\n  mine:\n    tools:\n      run: {shell: {command: cmd}, paths: file}\n",
])
def test_the_shorter_forms_the_loader_reads_are_valid(tmp_path: Path, text: str):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    load_policy_file(path)
    assert not list(_validator().iter_errors(yaml.safe_load(text)))


@pytest.mark.parametrize("text", [
    "name: typo\nmodee: enforce\n",
    "name: typo\nmode: enforse\n",
    "name: both\nshell: {}\nbash: {}\n",
    "name: typo\nshell: {scriptz: {}}\n",
    "name: bad\nretry_budget: 99\n",
])
def test_what_the_loader_refuses_the_schema_refuses(tmp_path: Path, text: str):
    from proxy.policy.errors import PolicyError

    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError):
        load_policy_file(path)
    assert list(_validator().iter_errors(yaml.safe_load(text)))
