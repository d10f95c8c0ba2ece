"""`allowlist-proxy serve --workers N`: one parent, N serving processes on one port, one store.

The parent binds the port (before it starts anything, so a busy port is one line and port 0 has its number),
migrates the store once (`serve`'s preflight), then spawns the workers, each handed the listening socket: the
kernel keeps one queue of connections and whichever worker's loop is free takes the next (a busy worker accepts
less; SO_REUSEPORT would hash each connection to a worker whether it is busy or not, and drop the connections
queued at a worker that dies). Agents hold keep-alive connections, so one agent's requests mostly stay on one
worker; nothing depends on it (docs/scaling.md).

The parent serves nothing itself. It
- decides the policy for all (proxy/policy/file/shared.py): its `PolicyManager` watches the files, holds widening edits,
  applies them at SIGHUP, and publishes what it serves; each worker serves exactly that, told by SIGUSR1;
- computes the figures for all, in its one figures' process (proxy/stats/figures_relay.py);
- restarts a worker that exits while it was not asked to (at once after a long life, else after a back-off);
- stops: SIGTERM or SIGINT is sent on to every worker, each drains its connections and exits; the parent exits 0
  once all have (1 if one had to be killed), 2 if a worker failed to start at all.
A worker whose parent dies stops as at SIGTERM (proxy/http/worker.py): nothing would restart it or pass SIGHUP on.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from prometheus_client.multiprocess import mark_process_dead

from proxy.config import Settings
from proxy.http.worker import WorkerPlan, run_worker
from proxy.logs import get_logger
from proxy.policy import PolicyManager, default_policy_path
from proxy.policy.file.shared import STATE_CHANGED, publish_state
from proxy.services import WorkerRole
from proxy.stats.prometheus import MULTIPROCESS_DIR
from proxy.throughput.in_flight import InFlightBoard

__all__ = ["Supervisor"]

log = get_logger("proxy.http.supervisor")

# A worker that lived this long before it exited is restarted at once; one that died sooner waits a back-off that
# doubles with each quick death in a row, up to the longest.
_LONG_LIFE_SECONDS = 10.0
_FIRST_BACKOFF_SECONDS = 0.5
_LONGEST_BACKOFF_SECONDS = 30.0
# Past the workers' graceful shutdown (uvicorn's, 30 s), how long the parent waits before it kills them.
_STOP_MARGIN_SECONDS = 10.0
_GRACEFUL_SECONDS = 30.0
# A Unix socket's path has room for 107 bytes; a longer temporary directory gets no figures relay.
_SOCKET_PATH_MAX = 100


@dataclass(eq=False)
class _Worker:
    index: int
    process: BaseProcess | None = None
    ready: Connection | None = None  # the parent's end of the worker's ready pipe, until it reported
    pid: int | None = None  # set once it serves
    started_at: float = 0.0
    quick_deaths: int = 0
    restart: asyncio.TimerHandle | None = None
    exits: list[int | None] = field(default_factory=list)


class Supervisor:
    def __init__(self, settings: Settings, sock: socket.socket, count: int) -> None:
        self.settings = settings
        self.sock = sock
        self.count = count
        self._ctx = multiprocessing.get_context("spawn")
        self._workers = [_Worker(i) for i in range(count)]
        self._running: Any = self._ctx.RawValue("i", 0)  # the workers serving now, for their /health
        self._in_flight: Any = InFlightBoard.cells(self._ctx, count)
        self._stopping = False
        self._failed = False
        self._killed = False
        self._all_up: asyncio.Event | None = None
        self._all_down: asyncio.Event | None = None
        self._dir: Path | None = None
        self._policy_state: Path | None = None
        self._figures_socket: str | None = None
        self._banner_printed = False

    def run(self) -> int:
        from proxy.logs import configure_logging

        configure_logging(self.settings.telemetry.log_level, self.settings.telemetry.log_format)
        return asyncio.run(self._main())

    # -- the parent's life -------------------------------------------------------------------------------

    async def _main(self) -> int:
        self._dir = Path(tempfile.mkdtemp(prefix="allowlist-proxy-"))  # 0700: this user's alone
        try:
            return await self._supervise()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    async def _supervise(self) -> int:
        assert self._dir is not None
        loop = asyncio.get_running_loop()
        self._all_up, self._all_down = asyncio.Event(), asyncio.Event()
        policies = PolicyManager(self.settings.policy.file or default_policy_path())
        self._policy_state = self._dir / "policy-state.json"
        publish_state(policies, self._policy_state)
        policies.reloaded.append(lambda: self._publish(policies))
        await policies.start()  # the watch, and SIGHUP: apply held edits
        relay, engine = await self._start_figures()
        metrics = self._dir / "metrics"
        metrics.mkdir()
        os.environ[MULTIPROCESS_DIR] = str(metrics)  # read by the workers' prometheus_client when they import it
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop, sig)
        try:
            for worker in self._workers:
                self._spawn(worker)
            up = asyncio.create_task(self._all_up.wait())
            down = asyncio.create_task(self._all_down.wait())
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            up.cancel()
            if not self._stopping:
                log.info("proxy.workers_started", workers=self.count, pids=[w.pid for w in self._workers],
                         parent=os.getpid())
            await down
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await policies.stop()
            if relay is not None:
                await relay.close()
            if engine is not None:
                await engine.dispose()
        if self._failed:
            return 2
        return 1 if self._killed else 0

    async def _start_figures(self) -> tuple[Any, Any]:
        """One figures' process for all the workers, where figures get a process of their own at all."""
        assert self._dir is not None
        if self.settings.stats.figures_process is False:
            return None, None
        from proxy.stats.figures_process import FiguresProcess
        from proxy.stats.figures_relay import FiguresRelay
        from proxy.store.db import create_engine

        path = str(self._dir / "figures.sock")
        engine = create_engine(self.settings.store.url)
        if not FiguresProcess.can_share(engine) or len(path) > _SOCKET_PATH_MAX:
            await engine.dispose()
            return None, None
        relay = FiguresRelay(path, self.settings.store.url, engine)
        await relay.start()
        self._figures_socket = path
        return relay, engine

    def _publish(self, policies: PolicyManager) -> None:
        """After each reload (in its thread): the workers serve what the parent serves now."""
        assert self._policy_state is not None
        try:
            changed = publish_state(policies, self._policy_state)
        except OSError as exc:
            log.error("policy.publish_failed", error=str(exc))
            return
        if changed:
            for worker in self._workers:
                self._tell(worker)

    def _tell(self, worker: _Worker) -> None:
        pid = worker.pid
        if pid is not None:  # only a worker that serves has its handler for the signal
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, STATE_CHANGED)

    # -- workers -----------------------------------------------------------------------------------------

    def _role(self, index: int) -> WorkerRole:
        assert self._policy_state is not None
        return WorkerRole(index=index, count=self.count, leader=os.getpid(), policy_state=str(self._policy_state),
                          figures_socket=self._figures_socket, running=self._running, in_flight=self._in_flight)

    def _spawn(self, worker: _Worker) -> None:
        worker.restart = None
        if self._stopping:
            return
        loop = asyncio.get_running_loop()
        ready, ready_child = self._ctx.Pipe(duplex=False)
        banner = worker.index == 0 and not self._banner_printed
        self._banner_printed = self._banner_printed or banner
        plan = WorkerPlan(settings=self.settings, listen=self.sock, role=self._role(worker.index), ready=ready_child,
                          banner=banner)
        process = self._ctx.Process(target=run_worker, args=(plan,), name=f"allowlist-proxy-worker-{worker.index}")
        process.start()
        ready_child.close()
        worker.process, worker.ready, worker.pid = process, ready, None
        worker.started_at = time.monotonic()
        loop.add_reader(ready.fileno(), self._on_ready, worker)
        loop.add_reader(process.sentinel, self._on_exit, worker)

    def _on_ready(self, worker: _Worker) -> None:
        ready = worker.ready
        if ready is None:
            return
        asyncio.get_running_loop().remove_reader(ready.fileno())
        worker.ready = None
        try:
            pid = ready.recv()
        except (EOFError, OSError):
            return  # it died before it served: `_on_exit` sees to it
        finally:
            ready.close()
        worker.pid = int(pid)
        self._running.value += 1
        self._tell(worker)  # what the parent published while it started
        assert self._all_up is not None
        if all(w.pid is not None for w in self._workers):
            self._all_up.set()

    def _on_exit(self, worker: _Worker) -> None:
        process = worker.process
        assert process is not None
        loop = asyncio.get_running_loop()
        loop.remove_reader(process.sentinel)
        if worker.ready is not None:
            loop.remove_reader(worker.ready.fileno())
            worker.ready.close()
            worker.ready = None
        process.join(1)
        code = process.exitcode
        worker.exits.append(code)
        served = worker.pid is not None
        if served:
            self._running.value -= 1
        InFlightBoard.clear(self._in_flight, worker.index)  # its requests in flight ended with it
        pid, worker.pid, worker.process = process.pid, None, None
        if pid is not None:
            with contextlib.suppress(OSError):
                mark_process_dead(pid)  # its live gauges go; its counters stay counted
        assert self._all_up is not None and self._all_down is not None
        if self._stopping:
            if all(w.process is None for w in self._workers):
                self._all_down.set()
            return
        if not self._all_up.is_set() and not served:
            # A worker that cannot start (a setting, the store, the policy) will not start next time either.
            log.error("proxy.worker_failed_to_start", worker=worker.index, pid=pid, exit_code=code)
            self._failed = True
            self._stop(None)
            return
        lived = time.monotonic() - worker.started_at
        worker.quick_deaths = 0 if lived >= _LONG_LIFE_SECONDS else worker.quick_deaths + 1
        delay = 0.0 if worker.quick_deaths == 0 else min(
            _LONGEST_BACKOFF_SECONDS, _FIRST_BACKOFF_SECONDS * 2 ** (worker.quick_deaths - 1))
        log.warning("proxy.worker_exited", worker=worker.index, pid=pid, exit_code=code, lived_s=round(lived, 1),
                    restart_in_s=delay)
        worker.restart = loop.call_later(delay, self._spawn, worker)

    # -- stopping ----------------------------------------------------------------------------------------

    def _stop(self, sig: int | None) -> None:
        if self._stopping:
            return
        self._stopping = True
        if sig is not None:
            log.info("proxy.stopping", signal=signal.Signals(sig).name, workers=self.count)
        for worker in self._workers:
            if worker.restart is not None:
                worker.restart.cancel()
                worker.restart = None
            if worker.process is not None and worker.process.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    worker.process.terminate()  # SIGTERM: drain, then exit
        assert self._all_down is not None
        if all(w.process is None for w in self._workers):
            self._all_down.set()
            return
        asyncio.get_running_loop().call_later(_GRACEFUL_SECONDS + _STOP_MARGIN_SECONDS, self._kill_stragglers)

    def _kill_stragglers(self) -> None:
        for worker in self._workers:
            if worker.process is not None and worker.process.is_alive():
                log.error("proxy.worker_killed", worker=worker.index, pid=worker.process.pid,
                          reason="it did not stop within the graceful shutdown")
                self._killed = True
                worker.process.kill()
