"""What an allowed command runs, computed from the project's environment (issue 38).

A real src-layout project made by the real `uv` (its own package `demo`, installed editable: `src/` on
`sys.path` through a `.pth`), with `requests` and `urllib3` installed in its `.venv`, and a script that
imports requests. Every module requests and urllib3 try to import without needing it (inside `try`, a
function, a loop over `importlib.import_module` names) is found here by the standard library's parser over
their installed source, independently of the proxy's text reading. Each one, written into the project's
import directories in any form (module, package, namespace directory, `.pyc`, extension module, a patch's
add or move), is refused; the ones the script really imports are shown to run when written straight to disk;
a new module inside the project's own package stays writable.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proxy.policy import Policy, judge_call, load_policy_file
from proxy.policy.paths import importable
from proxy.policy.paths.environment import environment_of

from .conftest import ROOT

UV = shutil.which("uv")
pytestmark = pytest.mark.skipif(UV is None, reason="needs uv (the test extra)")

# The distributions installed into the project, copied file by file from this interpreter's installs.
INSTALLED = ("requests", "urllib3", "idna", "certifi", "charset_normalizer")
SCRIPT = "import sys\nimport requests\nprint('fetched', sys.argv[1:])\n"
_ENV_KEEP = ("PATH", "HOME", "LANG", "TMPDIR")


def uv_env(cache: Path) -> dict[str, str]:
    env = {key: os.environ[key] for key in _ENV_KEEP if key in os.environ}
    env.update(UV_OFFLINE="1", UV_PYTHON=sys.executable, UV_PYTHON_DOWNLOADS="never", UV_NO_CONFIG="1",
               UV_CACHE_DIR=str(cache))
    return env


def run_search(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The allowed command, as the agent's shell would run it."""
    return subprocess.run([str(UV), "run", "scripts/search.py", "x"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=180, check=False)


def _uv_version() -> tuple[int, int, int]:
    out = subprocess.run([str(UV), "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    assert found, out
    return int(found.group(1)), int(found.group(2)), int(found.group(3))


def make_project(where: Path) -> tuple[Path, dict[str, str]]:
    """The src-layout project, built and synced by uv (offline: uv's own build backend), requests installed."""
    major, minor, patch = _uv_version()
    project = where / "demo"
    (project / "src" / "demo").mkdir(parents=True)
    (project / "scripts").mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "demo"\nversion = "0.1.0"\nrequires-python = ">=3.11"\ndependencies = []\n\n'
        f'[build-system]\nrequires = ["uv_build>={major}.{minor}.{patch},<{major}.{minor + 1}.0"]\n'
        'build-backend = "uv_build"\n')
    (project / "src" / "demo" / "__init__.py").write_text("VALUE = 1\n")
    (project / "scripts" / "search.py").write_text("import sys\nprint('fetched', sys.argv[1:])\n")
    env = uv_env(where / "uv-cache")
    first = run_search(project, env)
    assert first.returncode == 0, first.stderr
    site = Path(environment_of(str(project), "scripts").site_dirs[0])
    assert any(p.suffix == ".pth" for p in site.iterdir()), "uv installed the project editable"
    for name in INSTALLED:
        dist = importlib.metadata.distribution(name)
        for file in dist.files or ():
            source = Path(str(dist.locate_file(file)))
            target = site / file
            if "__pycache__" in file.parts or not source.is_file() or not target.resolve().is_relative_to(site):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    (project / "scripts" / "search.py").write_text(SCRIPT)
    second = run_search(project, env)
    assert second.returncode == 0 and "fetched" in second.stdout, second.stderr
    return project, env


def _installed(site: Path, name: str) -> bool:
    return (site / name).is_dir() or (site / f"{name}.py").exists() or any(site.glob(f"{name}.*.so")) \
        or (name in sys.stdlib_module_names and importlib.util.find_spec(name) is not None)


def optional_imports(site: Path, packages: tuple[str, ...] = ("requests", "urllib3")) -> set[str]:
    """Top-level names the packages import without needing them, found by `ast`: absolute imports inside a
    `try`, a function or an `if`, and literal names looped into `importlib.import_module`/`__import__`;
    those not installed in the environment."""
    found: set[str] = set()
    for package in packages:
        for file in (site / package).rglob("*.py"):
            tree = ast.parse(file.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, (ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.If)):
                    for inner in ast.walk(node):
                        if isinstance(inner, ast.Import):
                            found |= {alias.name.split(".")[0] for alias in inner.names}
                        elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                            found.add(inner.module.split(".")[0])
                if isinstance(node, ast.For) and isinstance(node.iter, (ast.Tuple, ast.List)):
                    calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)
                             and getattr(c.func, "attr", getattr(c.func, "id", "")) in ("import_module", "__import__")]
                    if calls:
                        found |= {e.value for e in node.iter.elts if isinstance(e, ast.Constant)
                                  and isinstance(e.value, str)}
    return {name for name in found if not _installed(site, name) and name not in packages}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    return make_project(tmp_path_factory.mktemp("imports"))


@pytest.fixture(scope="module")
def rooted(project: tuple[Path, dict[str, str]]) -> Policy:
    policy = load_policy_file(ROOT / "policies" / "strict.yaml").policy
    root = str(project[0])
    return policy.model_copy(update={"paths": policy.paths.model_copy(update={"project_root": [root]})})


def _site(project: Path) -> Path:
    return Path(environment_of(str(project), "scripts").site_dirs[0])


def _writes(name: str) -> list[str]:
    tag = sys.implementation.cache_tag
    return [f"src/{name}.py", f"src/{name}/__init__.py", f"src/{name}/zstd.py", f"src/__pycache__/{name}.{tag}.pyc",
            f"src/{name}.abi3.so", f"src/{name}.cpython-311-x86_64-linux-gnu.so", f"{name}.py", f"{name}/__init__.py"]


def _reasons(policy: Policy, tool: str, arguments: dict[str, Any]) -> tuple[str, ...]:
    return judge_call(policy, tool, arguments).reasons


def test_the_optional_imports_found_are_the_known_ones(project: tuple[Path, dict[str, str]]) -> None:
    names = optional_imports(_site(project[0]))
    # The cases, as requests 2.3x and urllib3 2.x write them.
    assert {"chardet", "simplejson", "brotli", "socks"} <= names, names
    assert names & {"zstandard", "backports", "compression"}, names


def test_every_optional_import_is_refused_at_the_write(project: tuple[Path, dict[str, str]], rooted: Policy) -> None:
    names = sorted(optional_imports(_site(project[0])))
    env = environment_of(str(project[0]), "scripts")
    assert importable.importable_names(env, wait=300) is not None, "the environment's names were computed"
    for name in names:
        for path in _writes(name):
            write = _reasons(rooted, "write", {"filePath": path, "content": "import os"})
            assert "protected_path" in write, (name, path)
        patch = f"*** Begin Patch\n*** Update File: src/demo/util.py\n*** Move to: src/{name}.py\n@@\n+x\n*** End Patch"
        assert "protected_path" in _reasons(rooted, "apply_patch", {"patchText": patch}), name
        assert "protected_path" in _reasons(rooted, "Write", {"file_path": f"{project[0]}/src/{name}.py",
                                                               "content": "x"}), name


def test_the_projects_own_package_stays_writable(project: tuple[Path, dict[str, str]], rooted: Policy) -> None:
    for path in ("src/demo/newmod.py", "src/demo/__init__.py", "src/demo/sub/x.py", "src/newthing.py",
                 "docs/notes.md", "tests/test_demo.py", "src/demo/chardet.py"):
        assert _reasons(rooted, "write", {"filePath": path, "content": "x = 1"}) == (), path


def test_the_import_time_ones_really_run(project: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """Written straight to disk (what an allowed write would do), the modules the script's `import requests`
    tries run under the allowed command: the attack is real, and each of them is among the refused names."""
    root, env = project
    marks = tmp_path / "marks"
    marks.mkdir()
    names = optional_imports(_site(root))
    written = []
    for name in sorted(names):
        path = root / "src" / f"{name}.py"
        path.write_text(f"open({str(marks / name)!r}, 'w').write('ran')\nraise ImportError('{name}')\n")
        written.append(path)
    try:
        run_search(root, env)
    finally:
        for path in written:
            path.unlink()
    ran = {p.name for p in marks.iterdir()}
    assert {"chardet", "simplejson"} <= ran, ran
    assert ran <= names


def test_without_an_environment_a_new_top_level_module_is_refused(project: tuple[Path, dict[str, str]],
                                                                   tmp_path: Path) -> None:
    """The project without `.venv` (uv has not run here, or the proxy is on another machine): what would
    import a new top-level module cannot be known, so creating one is refused unless the policy names it;
    editing the project's own package is not."""
    bare = tmp_path / "bare"
    shutil.copytree(project[0] / "src", bare / "src")
    shutil.copytree(project[0] / "scripts", bare / "scripts")
    shutil.copy(project[0] / "pyproject.toml", bare / "pyproject.toml")
    policy = load_policy_file(ROOT / "policies" / "strict.yaml").policy
    policy = policy.model_copy(update={"paths": policy.paths.model_copy(update={"project_root": [str(bare)]})})
    assert not environment_of(str(bare), "scripts").readable
    for path in ("src/newthing.py", "src/newpkg/__init__.py", "src/newpkg/mod.py", "newthing.py",
                 "src/chardet.py", "src/json.py"):
        assert "protected_path" in _reasons(policy, "write", {"filePath": path, "content": "x"}), path
    for path in ("src/demo/newmod.py", "src/demo/__init__.py", "src/newpkg/data.json", "docs/x.md"):
        assert _reasons(policy, "write", {"filePath": path, "content": "x"}) == (), path
    allowing = policy.model_copy(update={"protected": policy.protected.model_copy(update={
        "new_modules": policy.protected.new_modules.model_copy(update={"allow": ["newthing", "newpkg"]})})})
    for path in ("src/newthing.py", "src/newpkg/__init__.py", "newthing.py"):
        assert _reasons(allowing, "write", {"filePath": path, "content": "x"}) == (), path
    # The standard library's names are never the agent's to make.
    assert "protected_path" in _reasons(allowing, "write", {"filePath": "src/json.py", "content": "x"})
