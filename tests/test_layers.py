"""The import structure of `proxy/`: every import points down the layers that docs/DESIGN.md lists ("Layers"),
the policy engine's rooms point one way too ("The policy engine's rooms"), and no modules import each other round a
loop. Read from the code's own imports (`ast`), type-only ones too."""

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


def layers(marker: str = "layers") -> dict[str, int]:
    """Room -> its layer, 0 at the top, from the list in docs/DESIGN.md between `<!-- marker -->` lines."""
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    block = re.search(rf"<!-- {marker} -->\n```\n(.*?)```\n<!-- /{marker} -->", text, flags=re.S)
    assert block, f"docs/DESIGN.md has no {marker} list"
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


def policy_room(module: str) -> str | None:
    """The room of the policy engine a module is in (`proxy.policy.paths.protected` -> `paths`), its own name for a
    top-level module of the engine (`judge`, `schema`), `__init__` for the package itself; None outside it."""
    parts = module.split(".")
    if parts[:2] != ["proxy", "policy"]:
        return None
    return "__init__" if len(parts) == 2 else parts[2]


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


def test_every_policy_room_has_a_layer():
    order = layers("policy-rooms")
    rooms = {r for name in modules() if (r := policy_room(name)) is not None}
    assert rooms <= set(order), f"not in docs/DESIGN.md's policy room list: {sorted(rooms - set(order))}"
    assert set(order) <= rooms, f"listed in docs/DESIGN.md but not in proxy/policy/: {sorted(set(order) - rooms)}"


def test_policy_rooms_point_one_way():
    """Inside the policy engine no import runs back up its rooms, and none is excused."""
    order = layers("policy-rooms")
    upward = sorted(f"{a} -> {b}" for a, targets in graph().items() for b in targets
                    if (ra := policy_room(a)) is not None and (rb := policy_room(b)) is not None
                    and order[ra] > order[rb])
    assert not upward, "imports that run back up the policy rooms of docs/DESIGN.md:\n" + "\n".join(upward)


def test_every_policy_room_is_a_package_that_names_what_it_offers():
    for path in sorted((PACKAGE / "policy").iterdir()):
        if path.is_dir() and path.name != "__pycache__":
            init = path / "__init__.py"
            assert init.is_file(), f"{path.name} is not a package"
            tree = ast.parse(init.read_text())
            assert ast.get_docstring(tree), f"proxy/policy/{path.name}/__init__.py says nothing of what it offers"
            names = [n for n in tree.body if isinstance(n, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)]
            assert names, f"proxy/policy/{path.name}/__init__.py names nothing it offers (__all__)"


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
