"""One serving process: the app on a listening socket, until a signal stops it.

`allowlist-proxy serve` runs `serve_on` in its own process; with `--workers N` the parent (proxy/http/supervisor.py)
starts N processes that each run `run_worker`: the same server on the socket the parent bound (each accepts from
it: the kernel's one queue of connections, taken by whichever worker's loop is free first), with the parent's
policy state and figures (`WorkerRole`).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import uvicorn

from proxy.config import Settings
from proxy.http.server import TicklessServer
from proxy.services import WorkerRole

__all__ = ["WorkerPlan", "run_worker", "serve_on"]


@dataclass(frozen=True, kw_only=True)
class WorkerPlan:
    """What a worker process is started with (pickled to it: the socket and the pipe travel as descriptors)."""

    settings: Settings
    listen: socket.socket
    role: WorkerRole
    ready: Connection  # the worker sends its pid once it serves
    banner: bool  # the first start of worker 0 prints the start-up banner


class _Server(TicklessServer):
    """The server of one worker: says when it serves, and stops gracefully when the parent goes away."""

    def __init__(self, config: uvicorn.Config, ready: Connection | None) -> None:
        super().__init__(config)
        self._ready = ready

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        _SERVING.append(True)  # signals are uvicorn's from here on (`_before_serving`)
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._ready is not None:
            parent = multiprocessing.parent_process()
            if parent is not None:  # readable once the parent is gone, however it went (SIGKILL included)
                asyncio.get_running_loop().add_reader(parent.sentinel, self._parent_gone, parent.sentinel)
            with contextlib.suppress(OSError):
                self._ready.send(os.getpid())

    def _parent_gone(self, sentinel: int) -> None:
        asyncio.get_running_loop().remove_reader(sentinel)
        self.should_exit = True  # drained as at SIGTERM: nobody would restart this worker or forward SIGHUP


def serve_on(sock: socket.socket, settings: Settings, *, banner: bool = True, role: WorkerRole | None = None,
             ready: Connection | None = None) -> int:
    """Serve the proxy on `sock` until SIGTERM or SIGINT; 0 once it served and stopped, 2 when it never started."""
    from proxy.http.app import create_app
    from proxy.http.connections import raise_open_file_limit, server_options

    app = create_app(settings)
    app.state.listen = (settings.http.host, sock.getsockname()[1])
    app.state.print_banner = banner
    app.state.own_process = True
    app.state.role = role
    raise_open_file_limit(settings.http.max_connections)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=30,
                            **server_options(settings))
    server = _Server(config, ready)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _before_serving)  # a graceful stop at SIGTERM exits 0
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn raises Ctrl-C again once it has shut down gracefully: a normal stop
    finally:
        sock.close()
    return 0 if server.started else 2


_SERVING: list[bool] = []


def _before_serving(_sig: int, _frame: Any) -> None:
    """SIGTERM or SIGINT before uvicorn handles them (a worker stopped while it starts): exit at once. After a
    graceful stop uvicorn raises the signal that asked for it again, under this handler: nothing then (a worker's
    stop is its exit code 0, not a death by SIGTERM or a KeyboardInterrupt's traceback)."""
    if not _SERVING:
        raise SystemExit(0)


def run_worker(plan: WorkerPlan) -> None:
    """The entry of a worker process (multiprocessing, spawned)."""
    import structlog

    from proxy.config.settings import config_file_path
    from proxy.policy.paths.protected import register_own_files

    # The config file is not the agent's to change (what `Settings()` registers where it reads the file).
    config = config_file_path({"config": plan.settings.config} if plan.settings.config else {})
    if config is not None:
        register_own_files((str(config),))
    signal.signal(signal.SIGINT, _before_serving)  # Ctrl-C reaches the whole group: the parent's stop, as SIGTERM
    structlog.contextvars.bind_contextvars(worker=plan.role.index)
    code = serve_on(plan.listen, plan.settings, banner=plan.banner, role=plan.role, ready=plan.ready)
    plan.ready.close()
    sys.exit(code)
