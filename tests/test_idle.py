"""An idle proxy sleeps: no thread of `allowlist-proxy serve` wakes on a timer more than about once a second
(uvicorn's 0.1 s tick and watchfiles' 50 ms poll are gone), and what those timers did still happens: a signal
stops it at once, and the `date` header is the current second's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from email.utils import parsedate_to_datetime
from pathlib import Path

import httpx
import pytest

from proxy.testing.server import free_port
from tests.conftest import ROOT, STRICT_POLICY, voluntary_switches, wait_until, woken

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and inotify are Linux's")


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code in (200, 503)
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_an_idle_served_proxy_wakes_nothing_and_stops_at_a_signal(tmp_path: Path, stop: signal.Signals) -> None:
    port = free_port()
    env = {**os.environ, "ALLOWLIST_PROXY_LOG_LEVEL": "warning"}
    proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream",
                             "http://127.0.0.1:9/v1", "--db", f"sqlite:///{tmp_path / 'idle.db'}",
                             "--policy", str(STRICT_POLICY)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: _up(url), timeout=30)
        time.sleep(0.3)  # what the health check started settles
        before = voluntary_switches(proc.pid)
        time.sleep(1.0)
        wakes = woken(before, voluntary_switches(proc.pid))
        # The throughput windows end every 10 s; uvicorn's tick alone was 10 a second, watchfiles' poll 20.
        assert sum(wakes.values()) <= 2, wakes

        date = httpx.get(f"{url}/health").headers["date"]
        assert abs(parsedate_to_datetime(date).timestamp() - time.time()) < 2, date

        started = time.monotonic()
        proc.send_signal(stop)
        assert proc.wait(10) in (0, -stop)  # uvicorn re-raises the signal once shut down
        assert time.monotonic() - started < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_date_header_moves_with_the_clock(proxy) -> None:  # type: ignore[no-untyped-def]
    with proxy.client() as client:
        first = parsedate_to_datetime(client.get("/health").headers["date"])
        time.sleep(1.05)
        second = parsedate_to_datetime(client.get("/health").headers["date"])
    assert (second - first).total_seconds() >= 1
