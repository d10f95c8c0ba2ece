"""Agent drivers run as processes forked from an interpreter that imported them once (tests/e2e/drivers/forkserver.py),
one such interpreter per agent venv and test process.

An SDK agent's run spends most of its CPU importing its SDK (the Agents SDK ~3 s, pydantic-ai and LangGraph 1-2 s,
litellm's agents more), and a test runs several. Each run is still a process of its own, started in its world with
its own environment, arguments and working directory, killed on a timeout, its output and exit code read as
subprocess.Popen gives them; only the imports are done before (as the SIGKILL test's forkserver does for the proxy).
`E2E_FORK_DRIVERS=0` runs each driver as a plain new process instead.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["DriverRun", "start_driver"]

FORKSERVER = Path(__file__).parent / "drivers" / "forkserver.py"
_READY_SECONDS = 120.0


class DriverRun:
    """One forked run of a driver, read as a subprocess.Popen is (`communicate`, `kill`, `returncode`)."""

    def __init__(self, server: _ForkServer, pid: int, out: Path, err: Path) -> None:
        self._server, self.pid, self._out, self._err = server, pid, out, err
        self.returncode: int | None = None

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        code = self._server.wait(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(str(self._out), timeout or 0, self._read(self._out), self._read(self._err))
        self.returncode = code
        return self._read(self._out), self._read(self._err)

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    @staticmethod
    def _read(path: Path) -> str:
        return path.read_text(errors="replace") if path.exists() else ""


class _ForkServer:
    """The forkserver of one venv's python: requests in on its stdin, pids and exits back on its stdout."""

    def __init__(self, python: Path, drivers: tuple[Path, ...], env: dict[str, str]) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="allowlist-forkserver-"))
        self._log = self.home / "forkserver.log"
        with self._log.open("wb") as log:
            self._proc = subprocess.Popen([str(python), str(FORKSERVER), *map(str, drivers)], cwd=self.home,
                                          env={**env, "HOME": str(self.home)}, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        self._lock = threading.Condition()
        self._started: dict[int, int] = {}  # request id -> pid
        self._exits: dict[int, int] = {}  # pid -> exit code
        self._next = 0
        self.failure: str | None = None
        assert self._proc.stdout is not None
        for line in self._proc.stdout:  # what an import printed comes before the line that says it is ready
            if line.startswith(b'{"ready"'):
                threading.Thread(target=self._read, daemon=True, name="forkserver-reader").start()
                return
        self._proc.wait()
        self.failure = f"exit {self._proc.returncode}: {self._log.read_text(errors='replace')[-3000:]}"

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            message = json.loads(line)
            with self._lock:
                if "exit" in message:
                    self._exits[message["pid"]] = message["exit"]
                else:
                    self._started[message["id"]] = message["pid"]
                self._lock.notify_all()
        with self._lock:
            self.failure = self.failure or "the forkserver ended"
            self._lock.notify_all()

    def start(self, argv: list[str], cwd: Path, env: dict[str, str]) -> DriverRun:
        out_dir = Path(tempfile.mkdtemp(prefix="driver-", dir=self.home))
        out, err = out_dir / "stdout", out_dir / "stderr"
        with self._lock:
            self._next += 1
            ident = self._next
        request = {"id": ident, "argv": argv, "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
        assert self._proc.stdin is not None
        with self._lock:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
            while ident not in self._started:
                if self.failure is not None:
                    raise RuntimeError(f"the driver forkserver failed: {self.failure}")
                self._lock.wait(1.0)
            return DriverRun(self, self._started.pop(ident), out, err)

    def wait(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while pid not in self._exits:
                left = None if deadline is None else deadline - time.monotonic()
                if (left is not None and left <= 0) or self.failure is not None:
                    return None
                self._lock.wait(left)
            return self._exits.pop(pid)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()


_servers: dict[tuple[Path, Path], _ForkServer | None] = {}
_servers_lock = threading.Lock()


def _server(python: Path, driver: Path, env: dict[str, str]) -> _ForkServer | None:
    key = (python, driver)
    with _servers_lock:
        if key not in _servers:
            server = _ForkServer(python, (driver,), env)
            _servers[key] = None if server.failure is not None else server
            if server.failure is None:
                atexit.register(server.close)
        return _servers[key]


def start_driver(python: Path, driver: Path, args: list[str], *, cwd: Path, env: dict[str, str],
                 ) -> subprocess.Popen[str] | DriverRun:
    """`python driver args...` in `cwd` with exactly `env`: forked from the venv's forkserver (its imports done), or
    a plain new process where the forkserver cannot start or E2E_FORK_DRIVERS=0."""
    server = None if os.environ.get("E2E_FORK_DRIVERS") == "0" else _server(python, driver, _import_env(env))
    if server is None:
        return subprocess.Popen([str(python), str(driver), *args], cwd=cwd, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return server.start([str(driver), *args], cwd, env)


def _import_env(env: dict[str, str]) -> dict[str, Any]:
    """The environment the forkserver imports in: a run's, less what names one world (its HOME and PATH)."""
    return {k: v for k, v in env.items() if k not in ("HOME", "PATH")} | {"PATH": "/usr/bin:/bin"}
