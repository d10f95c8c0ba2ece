"""The wheel, installed into a fresh virtual environment, serves, migrates and runs the demo from a directory
that is not the source tree: what `pip install .`, `pipx install` and `uv tool install` give an operator.

The wheel is built without build isolation and installed without its dependencies, which the fresh
environment takes from the test environment through a `.pth` line, so the test needs no network.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy import __version__
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ directory of a fresh venv holding the proxy's wheel."""
    tmp = tmp_path_factory.mktemp("wheel")
    # Built from a copy of what the package is made of: setuptools leaves a build/ folder in the source,
    # whose stale files would otherwise go into the next wheel.
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("proxy", "migrations"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    if build.returncode != 0 and "No module named" in build.stderr:
        pytest.skip(f"cannot build a wheel here without build isolation: {build.stderr.strip()[-200:]}")
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp / "dist").glob("allowlist_proxy-*.whl")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    fresh_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True).stdout.strip()
    # Appended after the fresh site-packages, so the wheel's `proxy` comes first; the editable install's
    # own .pth files in that directory are not processed from here.
    Path(fresh_site, "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                              "--no-index", "-q", str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    return env_dir / "bin"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOWLIST_PROXY_") and k != "PYTHONPATH"}
    return env


def test_the_installed_package_is_the_wheel_and_knows_its_version(installed: Path, tmp_path: Path):
    where = subprocess.run([installed / "python", "-c", "import proxy; print(proxy.__file__)"], cwd=tmp_path,
                           env=_env(), capture_output=True, text=True, timeout=60)
    assert where.stdout.startswith(str(installed.parent)), where.stdout + where.stderr
    version = subprocess.run([installed / "allowlist-proxy", "--version"], cwd=tmp_path, env=_env(),
                             capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == f"allowlist-proxy {__version__}"


def test_db_upgrade_reports_the_real_revision(installed: Path, tmp_path: Path):
    result = subprocess.run([installed / "allowlist-proxy", "db", "upgrade", "--db", "sqlite:///store.db"],
                            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert re.search(r"schema at 0\d{3}", result.stdout), result.stdout
    # The wheel carries migrations/ (top level in the source) beside the installed package.
    where = subprocess.run([installed / "python", "-c", "import proxy.store.db as d; print(d.MIGRATIONS_DIR)"],
                           cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60).stdout.strip()
    assert where.startswith(str(installed.parent)) and Path(where, "versions").is_dir(), where
    assert (tmp_path / "store.db").is_file()


def test_db_downgrade_and_backup_run_from_the_wheel(installed: Path, tmp_path: Path):
    """The migrations' downgrade steps travel in the wheel too: an installed proxy can take its store back."""
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([installed / "allowlist-proxy", "db", *args, "--db", "sqlite:///store.db"],
                              cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180)

    assert run("upgrade").returncode == 0
    down = run("downgrade", "--to", "0001")
    assert down.returncode == 0, down.stderr
    assert "schema at 0001" in down.stdout and list(tmp_path.glob("store.db.before-0001"))
    up = run("upgrade")
    assert up.returncode == 0 and "(head)" in up.stdout and "from 0001" in up.stdout, up.stdout + up.stderr
    copy = run("backup", "--to", "copy.db")
    assert copy.returncode == 0 and (tmp_path / "copy.db").is_file(), copy.stderr


@contextlib.contextmanager
def _served(installed: Path, cwd: Path, *args: str) -> Iterator[tuple[str, str]]:
    """`allowlist-proxy serve --port 0 ARGS` from `cwd`: (its base URL, the banner); stopped with Ctrl-C."""
    server = subprocess.Popen([installed / "allowlist-proxy", "serve", "--port", "0", *args],
                              cwd=cwd, env=_env(), stderr=subprocess.PIPE, text=True)
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 60
        assert server.stderr is not None
        while not any(line.startswith("  store ") for line in lines):
            assert time.monotonic() < deadline and server.poll() is None, "".join(lines)
            lines.append(server.stderr.readline())
        text = "".join(lines)
        url = re.search(r"listening\s+(http://127\.0\.0\.1:(\d+))/v1", text)
        assert url and url.group(2) != "0", text
        yield url.group(1), text
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=60)
    assert server.returncode == 0


def test_serve_starts_with_a_banner_on_a_free_port(installed: Path, tmp_path: Path):
    with _served(installed, tmp_path, "--upstream", "http://127.0.0.1:9/v1") as (url, text):
        health = httpx.get(url + "/health", timeout=10)
        # The proxy answers; with its upstream down it may call itself degraded (503).
        assert health.status_code in (200, 503) and health.json()["upstream_reachable"] is False
        assert f"allowlist-proxy {__version__}" in text and "UNREACHABLE" in text
        assert "default_policies/strict.yaml" in text  # no policies/ here: the packaged policy


def test_demo_runs_from_the_wheel(installed: Path, tmp_path: Path):
    result = subprocess.run([installed / "allowlist-proxy", "demo", "--exit", "--port", "0", "--sessions", "1",
                             "--duration", "0"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == 0, result.stderr
    assert "Err/tool" in result.stdout and "/dashboard" in result.stdout


def test_a_fresh_install_served_from_elsewhere_is_healthy(installed: Path, tmp_path: Path, upstream):
    """Only policy files are policies: the packaged tool-profiles.yaml beside the packaged policy is data."""
    with _served(installed, tmp_path, "--upstream", upstream.url, "--db", "sqlite:///store.db") as (url, text):
        health = httpx.get(url + "/health", timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "ok", health.text
        policies = httpx.get(url + "/policies", timeout=10).json()
        assert "tool-profiles" not in str(policies.get("errors")), policies
        assert "tool-profiles" not in text and "error" not in text.lower(), text
