"""Runs an ASGI app under uvicorn in a thread of its own, on 127.0.0.1 and a free port."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from proxy.http.server import TicklessServer

__all__ = ["ServerThread", "free_port"]

# uvicorn sets its loggers up (`logging.config.dictConfig`) for every Config it makes: for a test starting two
# servers that was a tenth of starting them. The first server of a process sets them up; the rest keep that.
_uvicorn_logging = threading.Lock()
_uvicorn_logging_done = False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _logging_config() -> dict[str, Any] | None:
    """uvicorn's logging config for the first server of the process, None (leave it as set) for the others."""
    global _uvicorn_logging_done
    with _uvicorn_logging:
        first, _uvicorn_logging_done = not _uvicorn_logging_done, True
    return LOGGING_CONFIG if first else None


class ServerThread:
    def __init__(self, app: Any, *, port: int | None = None, log_level: str = "warning",
                 options: dict[str, Any] | None = None) -> None:
        # The socket is bound here and handed to uvicorn, so no other process can take the port between
        # choosing it and listening on it.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", port or 0))
        self.port = self._socket.getsockname()[1]
        defaults = {"lifespan": "on", "timeout_graceful_shutdown": 5, "log_config": _logging_config()}
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level=log_level, access_log=False,
                                **{**defaults, **(options or {})})
        # The server `allowlist-proxy serve` runs: no tick, so told to stop it stops at once.
        self.server = TicklessServer(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._socket]}, daemon=True,
                                        name=f"uvicorn-{self.port}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"server on port {self.port} failed to start")
            if time.monotonic() > deadline:
                raise TimeoutError(f"server on port {self.port} did not start in {timeout}s")
            time.sleep(0.01)
        return self

    def request_stop(self) -> None:
        """Starts stopping without waiting, so that several servers stop side by side."""
        self.server.should_exit = True

    def stop(self, timeout: float = 15.0) -> None:
        self.request_stop()
        self._thread.join(timeout)
        self._socket.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
