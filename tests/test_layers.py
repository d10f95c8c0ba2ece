"""The import structure of `proxy/`: every import points down the layers that docs/DESIGN.md lists ("Layers"),
and no modules import each other round a loop. Read from the code's own imports (`ast`), type-only ones too."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "proxy"

# Imports allowed to run back up, each with its reason: (importing module, imported module).
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


def layers() -> dict[str, int]:
    """Room -> its layer, 0 at the top, from the list in docs/DESIGN.md."""
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    block = re.search(r"<!-- layers -->\n```\n(.*?)```\n<!-- /layers -->", text, flags=re.S)
    assert block, "docs/DESIGN.md has no layer list"
    order: dict[str, int] = {}
    for index, line in enumerate(block.group(1).splitlines()):
        names = re.split(r"\s{2,}", line.strip())[0].split()
        for name in names:
            assert name not in order, f"{name} is listed twice"
            order[name] = index
    return order


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def room(module: str) -> str:
    """The folder under proxy/ a module is in, or its own name for a top-level module."""
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The modules of `proxy` that `module` imports, wherever the import stands (functions, TYPE_CHECKING)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1], *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("proxy") and target != module:
                yield target


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imports(name, path, known)) for name, path in known.items()}


def test_every_room_has_a_layer():
    order = layers()
    rooms = {room(name) for name in modules()}
    assert rooms <= set(order), f"not in docs/DESIGN.md's layer list: {sorted(rooms - set(order))}"
    assert set(order) <= rooms, f"listed in docs/DESIGN.md but not in proxy/: {sorted(set(order) - rooms)}"


def test_imports_point_down():
    order = layers()
    upward = sorted((a, b) for a, targets in graph().items() for b in targets
                    if order[room(a)] > order[room(b)])
    unexplained = [f"{a} -> {b}" for a, b in upward if (a, b) not in ALLOWED_UPWARD]
    assert not unexplained, "imports that run back up the layers of docs/DESIGN.md:\n" + "\n".join(unexplained)
    stale = sorted(set(ALLOWED_UPWARD) - set(upward))
    assert not stale, f"ALLOWED_UPWARD names imports that are gone: {stale}"
    assert len({(room(a), room(b)) for a, b in upward}) <= 3


def test_no_circles():
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert not circles, f"modules that import each other round a loop: {circles}"


@pytest.mark.parametrize("source, expected", [
    ("from proxy.record import RequestRecord", {"proxy.record"}),
    ("from ..stats import prometheus", {"proxy.stats.prometheus"}),
    ("if TYPE_CHECKING:\n    from proxy.store.writer import StoreWriter", {"proxy.store.writer"}),
    ("def f():\n    import proxy.enforce.judging", {"proxy.enforce.judging"}),
])
def test_imports_are_read_wherever_they_stand(tmp_path: Path, source: str, expected: set[str]):
    path = tmp_path / "mod.py"
    path.write_text(source)
    known = modules()
    assert set(imports("proxy.policy.mod", path, known)) == expected
