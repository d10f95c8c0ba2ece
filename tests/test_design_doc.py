"""docs/DESIGN.md shows the design as it is: every module and path it names exists, every package of `proxy/` is
named in it, it stays under 400 lines, and every decision record in docs/decisions/ is listed in its index.

How DESIGN.md is read, so that prose can name things freely and a stale name still fails:
- A path is any `proxy/...`, `tests/...`, `docs/...`, `bench/...`, `scripts/...`, `migrations/...`, `docker/...` or
  `policies/...` written anywhere in the text, backticked or not: a file (`proxy/store/writer.py`) or a folder
  (`proxy/policy/shell/`). A placeholder ends the path before it: `proxy/policy/<room>/` is read as `proxy/policy/`.
  A path right after `run ` is a command of the agent's project (`uv run scripts/search.py`), not of this repository.
  Relative Markdown links (`[peers](peers.md)`) are paths from docs/.
- The layout table is the one whose header is `| folder | step of the data flow | modules |`. Its folder cell names
  `proxy/<folder>/` (`top level` is `proxy/` itself); in its module cell the backticked names outside parentheses
  are that folder's modules or packages (`a`/`b` is two names); what is in parentheses describes them (classes,
  functions, files) and is not read.
- A package of `proxy/` (a folder with an `__init__.py`, the policy engine's rooms included) is named when the text
  holds its path (`proxy/sessions/`), or it is a folder of the layout table, or a room in the `policy-rooms` list.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

DESIGN = ROOT / "docs" / "DESIGN.md"
DECISIONS = ROOT / "docs" / "decisions"
MAX_LINES = 400
TABLE_HEADER = "| folder | step of the data flow | modules |"
_TOP = ("proxy", "tests", "docs", "bench", "scripts", "migrations", "docker", "policies")
_PATH = re.compile(rf"(?<![\w./<-])(?<!run )((?:{'|'.join(_TOP)})/[\w./-]*)")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _text() -> str:
    return DESIGN.read_text(encoding="utf-8")


def named_paths(text: str) -> set[str]:
    """Every repository path the text names (see the module docstring), as written, trailing punctuation dropped."""
    return {match.group(1).rstrip(".,;:") for match in _PATH.finditer(text)}


def linked_paths(text: str) -> set[str]:
    """Relative Markdown link targets, from docs/."""
    return {target for target in _LINK.findall(text) if "://" not in target and not target.startswith("mailto:")}


def layout_rows(text: str) -> list[tuple[str, list[str]]]:
    """(folder under proxy/, '' for the top level; its modules) for each row of the layout table."""
    lines = text.splitlines()
    assert TABLE_HEADER in lines, f"docs/DESIGN.md has no layout table headed {TABLE_HEADER!r}"
    rows = []
    for line in lines[lines.index(TABLE_HEADER) + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 3, f"a layout row without three cells: {line[:80]}"
        folder = "" if cells[0] == "top level" else cells[0].strip("`").rstrip("/")
        rows.append((folder, module_names(cells[2])))
    return rows


def module_names(cell: str) -> list[str]:
    """The backticked names outside parentheses, `a`/`b` read as two."""
    depth, outside = 0, []
    for char in cell:
        depth += char == "("
        if depth == 0:
            outside.append(char)
        depth -= char == ")" and depth > 0
    return re.findall(r"`([A-Za-z_][\w]*)`", "".join(outside))


def policy_rooms(text: str) -> set[str]:
    block = re.search(r"<!-- policy-rooms -->\n```\n(.*?)```\n<!-- /policy-rooms -->", text, flags=re.S)
    assert block, "docs/DESIGN.md has no policy-rooms list"
    return {name for line in block.group(1).splitlines() for name in re.split(r"\s{2,}", line.strip())[0].split()}


def packages() -> list[Path]:
    """Every package of proxy/ (a folder holding an __init__.py), relative to the repository, proxy/ itself aside."""
    return sorted(init.parent.relative_to(ROOT) for init in (ROOT / "proxy").rglob("__init__.py")
                  if init.parent != ROOT / "proxy" and "__pycache__" not in init.parts)


def test_design_is_under_400_lines() -> None:
    lines = len(_text().splitlines())
    assert lines < MAX_LINES, f"docs/DESIGN.md has {lines} lines; the history belongs in docs/decisions/"


def test_every_path_it_names_exists() -> None:
    text = _text()
    missing = sorted(path for path in named_paths(text) if not (ROOT / path).exists())
    missing += sorted(f"docs/{link}" for link in linked_paths(text) if not (ROOT / "docs" / link).exists())
    assert not missing, f"docs/DESIGN.md names paths that do not exist: {missing}"


def test_every_module_of_the_layout_table_exists() -> None:
    rows = layout_rows(_text())
    assert rows, "the layout table has no rows"
    missing = []
    for folder, names in rows:
        base = ROOT / "proxy" / folder
        assert base.is_dir(), f"the layout table names proxy/{folder}/, which is not a folder"
        assert names, f"the layout row of proxy/{folder or ''} names no module"
        missing += [f"proxy/{folder + '/' if folder else ''}{name}" for name in names
                    if not (base / f"{name}.py").is_file() and not (base / name).is_dir()]
    assert not missing, f"the layout table of docs/DESIGN.md names modules that do not exist: {missing}"


def test_every_package_of_proxy_is_named() -> None:
    text = _text()
    folders = {folder for folder, _ in layout_rows(text)}
    rooms = policy_rooms(text)
    unnamed = []
    for package in packages():
        parts = package.parts[1:]
        named = (f"{package.as_posix()}/" in text
                 or (len(parts) == 1 and parts[0] in folders)
                 or (len(parts) == 2 and parts[0] == "policy" and parts[1] in rooms))
        if not named:
            unnamed.append(f"{package.as_posix()}/")
    assert not unnamed, f"packages of proxy/ that docs/DESIGN.md does not name: {unnamed}"


def test_every_decision_record_is_in_the_index() -> None:
    index = (DECISIONS / "README.md").read_text(encoding="utf-8")
    records = sorted(path.name for path in DECISIONS.glob("*.md") if path.name != "README.md")
    assert records, "docs/decisions/ holds no records"
    unlisted = [name for name in records if f"]({name})" not in index]
    assert not unlisted, f"decision records missing from docs/decisions/README.md: {unlisted}"
    stale = sorted(target for target in linked_paths(index) if not (DECISIONS / target).exists())
    assert not stale, f"docs/decisions/README.md links records that do not exist: {stale}"


def test_numbered_records_are_in_order_and_in_nygards_form() -> None:
    numbered = sorted(DECISIONS.glob("[0-9][0-9][0-9][0-9]-*.md"))
    numbers = [int(path.name[:4]) for path in numbered]
    assert numbers == list(range(1, len(numbers) + 1)), "decision records are numbered 0001, 0002, ... without gaps"
    for path in numbered:
        text = path.read_text(encoding="utf-8")
        assert text.startswith(f"# {path.name[:4]}. "), f"{path.name} starts with '# {path.name[:4]}. <title>'"
        headings = re.findall(r"^## (\w+)$", text, flags=re.M)
        assert headings == ["Status", "Context", "Decision", "Consequences"], f"{path.name}: {headings}"


@pytest.mark.parametrize("path", sorted(p.name for p in DECISIONS.glob("*.md") if p.name != "README.md"))
def test_each_record_is_short(path: str) -> None:
    lines = len((DECISIONS / path).read_text(encoding="utf-8").splitlines())
    assert lines <= 40, f"docs/decisions/{path} has {lines} lines: one decision, its context and consequences"


@pytest.mark.parametrize("text, expected", [
    ("see `proxy/store/writer.py`.", {"proxy/store/writer.py"}),
    ("a room (`proxy/policy/<room>/`), then", {"proxy/policy/"}),
    ("allowlist-proxy/bin and xproxy/a.py", set()),
    ("`uv run scripts/search.py x` runs; scripts/install-opencode.sh", {"scripts/install-opencode.sh"}),
    ("tests/test_layers.py reads docs/DESIGN.md, bench/idle.py", {"tests/test_layers.py", "docs/DESIGN.md",
                                                                  "bench/idle.py"}),
])
def test_paths_are_read_as_documented(text: str, expected: set[str]) -> None:
    assert named_paths(text) == expected


@pytest.mark.parametrize("cell, expected", [
    ("`app` (routes, `require_admin`), `dashboard` (+ `static/`), `server`", ["app", "dashboard", "server"]),
    ("`figures_process`/`figures_worker` (the worker (nested) process), `webhook`",
     ["figures_process", "figures_worker", "webhook"]),
])
def test_module_cells_are_read_as_documented(cell: str, expected: list[str]) -> None:
    assert module_names(cell) == expected
