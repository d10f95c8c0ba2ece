"""Dependencies: every one bounded to the tested range, one pinned set (requirements.lock) inside those
bounds, used by the Docker image and CI; the modules that reach into uvicorn's and httpx's internals run on
versions inside the range their bounds name."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
RUNTIME = [Requirement(text) for text in PYPROJECT["project"]["dependencies"]]
LOCK = ROOT / "requirements.lock"


def _locked() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, pinned = line.partition("==")
            pins[canonicalize_name(name)] = pinned.split(";")[0].strip()
    return pins


def test_every_runtime_dependency_has_an_upper_bound():
    for requirement in RUNTIME:
        assert any(spec.operator in ("<", "<=", "==", "~=") for spec in requirement.specifier), requirement


def test_the_lock_pins_every_runtime_dependency_inside_its_bounds():
    pins = _locked()
    for requirement in RUNTIME:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in requirements.lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), (requirement, pins[name])


def test_the_private_internals_run_on_a_bounded_version():
    # proxy/http/connections.py subclasses uvicorn's protocol classes; proxy/upstream/transport.py sets httpx's
    # `_pool` to an httpcore pool: both only on the releases the bounds name.
    for requirement in RUNTIME:
        if canonicalize_name(requirement.name) in ("uvicorn", "httpx", "httpcore"):
            assert requirement.specifier.contains(version(requirement.name)), (requirement, version(requirement.name))


def test_the_image_and_ci_install_through_the_lock():
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert re.search(r"COPY [^\n]*requirements\.lock", dockerfile)
    assert "-c requirements.lock" in dockerfile
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'PIP_CONSTRAINT="$PWD/requirements.lock"' in ci
    # The README's commands stay verbatim in CI and true on a fresh clone.
    assert "pip install -q -e '.[test]' && pytest -q" in ci
