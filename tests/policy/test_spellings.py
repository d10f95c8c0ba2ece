"""Names as other filesystems read them (issue 38): a protected path is refused under every name macOS or
Windows would open it by - default-ignorable code points (HFS+), alternate data streams, trailing dots and
spaces, 8.3 short names (NTFS), case - and names that only look alike stay allowed."""

from __future__ import annotations

import pytest

from proxy.policy import judge_call, load_policy_file
from proxy.policy.paths.spellings import abbreviates

from .conftest import ROOT

POLICY = load_policy_file(ROOT / "policies" / "strict.yaml").policy


def _write(path: str) -> tuple[str, ...]:
    return judge_call(POLICY, "write", {"filePath": path, "content": "x"}).reasons


def _read(path: str) -> tuple[str, ...]:
    return judge_call(POLICY, "read", {"filePath": path}).reasons


@pytest.mark.parametrize("path", [
    # HFS+ ignores these code points: each names `.git/config` or `scripts/search.py` there.
    ".g\u200cit/config", ".gi\u200dt/config", "\u200b.git/config", ".git\ufeff/hooks/pre-commit",
    "scr\u00adipts/search.py", "scripts\u2060/search.py", "py\u034fproject.toml", ".git\ufe0f/config",
    "s\U000e0041cripts/x.py", "uv\u180e.lock", ".git\u202e/config",
    # NTFS alternate data streams: the file or directory before the colon.
    ".git::$INDEX_ALLOCATION/hooks/pre-commit", ".git:$I30:$INDEX_ALLOCATION/config", "scripts/search.py::$DATA",
    "pyproject.toml:stream", "scripts:x/search.py", ".venv/lib/python3.11/site-packages/x.pth:$DATA",
    # Windows drops trailing dots and spaces; case never mattered.
    ".git./config", "scripts /search.py", "SCRIPTS/Search.PY", ".GIT/CONFIG",
    # NTFS 8.3 short names, and the hashed form.
    "GIT~1/config", "git~2/hooks/pre-commit", "SCRIPT~1/search.py", "PYPROJ~1.TOM", "SITECU~1.PY", "VENV~1/x",
    "__PYCA~1/x.pyc", ".venv/lib/SITE-P~1/evil.pth", "GI1A2B~1/config", "CLAUDE~1.MD", "AGENTS~1.MD",
    "GITMOD~1", "src/CHARDE~1.PY",
])  # fmt: skip
def test_other_filesystems_names_of_protected_writes(path: str) -> None:
    assert "protected_path" in _write(path), path


@pytest.mark.parametrize("path", [".e\u200bnv", ".env::$DATA", ".env:x", "ENVPRO~1.PRO", "ID_RSA~1", "SERVER~1.PEM",
                                  ".git:x/config", "GIT~1/config", ".aws/CREDEN~1"])
def test_other_filesystems_names_of_protected_reads(path: str) -> None:
    assert "protected_path" in _read(path), path


@pytest.mark.parametrize("path", ["notes:draft.md", "docs/NOTES~1.MD", "docs/a\u200bb.md", "docs/time 10:30.txt",
                                  "NOTES~1.TXT"])
def test_names_that_only_look_alike_stay_allowed(path: str) -> None:
    assert _write(path) == (), path


@pytest.mark.parametrize("path", ["README~1.MD", "BACKUP~1.TXT"])
def test_a_six_letter_short_name_may_stand_for_a_secrets_file(path: str) -> None:
    """Windows keeps six characters of a longer base: `README~1.MD` may be `readme.secrets.md` (`*.secrets.*`, a
    protected read), while `NOTES~1` has a five-character base, too short for any name with `.secrets.` in it."""
    assert "protected_path" in _write(path), path


@pytest.mark.parametrize(("short", "name", "expected"), [
    ("git~1", ".git", True), ("script~1", "scripts", True), ("pyproj~1.tom", "pyproject.toml", True),
    ("pyproj~1.tom", "pyproject.cfg", False), ("x~1.py", "x.pyc", False), ("x~1.pyc", "x.pyc", True),
    ("envpro~1.pro", ".env.*", True), ("server~1.pem", "*.pem", True), ("server~1.txt", "*.pem", False),
    ("gi1a2b~1", ".gitmodules", True), ("gi1a2b~1", "scripts", False), ("notes~1.md", "agents.md", False),
    ("git~1", "scripts", False), ("git", ".git", False),
])  # fmt: skip
def test_which_names_a_short_name_could_stand_for(short: str, name: str, expected: bool) -> None:
    assert abbreviates(short, name) is expected
