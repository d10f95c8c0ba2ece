"""LICENSE is the MIT licence pyproject.toml declares; CHANGELOG.md is in Keep a Changelog's form, the coming
release's section first."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import ROOT

SECTIONS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_the_license_is_the_mit_licence_pyproject_declares():
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "MIT"
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert re.search(r"^Copyright \(c\) \d{4} allowlist-proxy contributors$", text, flags=re.M)
    assert "Permission is hereby granted, free of charge" in text and 'THE SOFTWARE IS PROVIDED "AS IS"' in text


def test_the_changelog_keeps_a_changelog():
    lines = (ROOT / "CHANGELOG.md").read_text().splitlines()
    assert lines[0] == "# Changelog"
    versions = [line for line in lines if line.startswith("## ")]
    assert versions[0] == "## [Unreleased]"
    for line in versions[1:]:
        assert re.fullmatch(r"## \[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", line), line
    sections = {line[4:] for line in lines if line.startswith("### ")}
    assert sections <= SECTIONS, sections - SECTIONS
