"""No process outlives the proxy: the figures' worker (proxy/stats/figures_process.py) and multiprocessing's
resource tracker end within 2 s of the proxy, however it ends: SIGTERM at any moment (right after a /stats
request, while the worker is still starting, or once it runs) and SIGKILL of the proxy, again and again.

Each trial runs the real `allowlist-proxy serve` as a process of its own (the figures get their worker only
there), records every process below it (Linux /proc), ends it, and waits for each of them to be gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from proxy.testing.server import free_port
from tests.conftest import ROOT, STRICT_POLICY, wait_until

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")

TRIALS = int(os.environ.get("ALLOWLIST_PROXY_TEST_ORPHAN_TRIALS", "3"))
GONE_WITHIN = 2.0


@pytest.fixture
def backend() -> str:
    return "sqlite"  # the worker opens the same store; the process model does not depend on the database


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended; only its parent's wait is missing


def descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (parent := _parent(int(entry.name))) is not None:
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


def _serve(tmp_path: Path, upstream_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "ALLOWLIST_PROXY_LOG_LEVEL": "error"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream", upstream_url,
         "--db", f"sqlite:///{tmp_path / 'orphans.db'}", "--policy", str(STRICT_POLICY)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(url + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    assert wait_until(up, timeout=60), "the proxy did not start"
    return proc, url


def _stats(url: str) -> None:
    assert httpx.get(url + "/stats/models", timeout=30).status_code == 200


def _end(proc: subprocess.Popen[bytes], how: signal.Signals, below: set[int]) -> None:
    """Send `how`, then every process that was below the proxy must be gone within GONE_WITHIN."""
    proc.send_signal(how)
    proc.wait(timeout=30)  # reaps the proxy itself; what it started must end by itself
    deadline = time.monotonic() + GONE_WITHIN
    while time.monotonic() < deadline and any(_alive(pid) for pid in below):
        time.sleep(0.02)
    left = {pid: _command(pid) for pid in below if _alive(pid)}
    for pid in left:  # not to leave them behind for the next test
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running {GONE_WITHIN} s after {how.name} to the proxy: {left}"


def _below_with_worker(proc: subprocess.Popen[bytes], url: str) -> set[int]:
    """Asks until the figures' worker runs (the first ask starts it), then the processes below the proxy."""
    def running() -> bool:
        _stats(url)
        return any("multiprocessing" in _command(pid) and "spawn_main" in _command(pid)
                   for pid in descendants(proc.pid))

    assert wait_until(running, timeout=60), "the figures' worker did not start"
    return descendants(proc.pid)


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
@pytest.mark.parametrize("when", ["running", "starting"])
def test_the_figures_worker_ends_with_the_proxy(upstream, tmp_path: Path, how: signal.Signals, when: str):
    for trial in range(TRIALS):
        proc, url = _serve(tmp_path, upstream.url)
        try:
            if when == "running":
                below = _below_with_worker(proc, url)
            else:
                # Right after the first /stats request: the worker is being spawned (or importing) as the proxy ends.
                _stats(url)
                time.sleep(0.05 * trial)
                below = descendants(proc.pid)
            # The first ask spawns the worker before it answers: it is below the proxy already, starting.
            assert any("spawn_main" in _command(pid) for pid in below), {pid: _command(pid) for pid in below}
            _end(proc, how, below)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
