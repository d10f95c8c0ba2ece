"""The stats routes' figures computed in a process of their own.

Over a large store one `/stats/models` is tens of milliseconds of Python in the proxy's process: reading and
summing the rollups' rows. The GIL it holds meanwhile is the one every relayed stream's event loop and the
store's writer thread need, so each of their steps waits for it: a dashboard asking again and again made
releases and chunks later. In a process of its own the operating system shares the CPUs between the two
instead, and nothing in the proxy waits for the figures. The worker runs at the lowest CPU priority, so on a
busy machine it is the figures that wait.

One worker process (spawned, not forked: the proxy runs threads) opens its own engine on the same store. It is
started at the first ask; that ask, and any made while the worker starts, are computed in the proxy's process,
as they are wherever the worker cannot run. A worker that dies is replaced at the next ask, and the ask it was
computing is computed in the proxy's process; a worker that fails where the proxy's process does not (it
cannot open the store) is given up. The figures are the same functions either way: module-level
coroutines `fn(engine, **kwargs)` whose arguments and results pickle (plain values).

The worker never outlives the proxy: closing terminates it, and the worker itself ends as soon as the proxy's
process does, however that ends, SIGKILL included (proxy/stats/figures_worker.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.errors import ProxyError
from proxy.logs import get_logger
from proxy.stats.figures_worker import compute as _compute
from proxy.stats.figures_worker import start_worker
from proxy.store.dialect import in_memory

__all__ = ["FiguresProcess"]

log = get_logger("proxy.stats.figures_process")

T = TypeVar("T")


class FiguresProcess:
    @staticmethod
    def can_share(engine: AsyncEngine) -> bool:
        """Whether another process opening the engine's URL reads the same store: not a SQLite memory database."""
        return not in_memory(engine)

    def __init__(self, db_url: str) -> None:
        self._db_url = db_url
        self._pool: ProcessPoolExecutor | None = None
        self._ready: asyncio.Future[int] | None = None  # the worker's pid, once it has started
        self._given_up = False

    @property
    def pid(self) -> int | None:
        """The worker's process id, None until it has started."""
        ready = self._ready
        if ready is None or not ready.done() or ready.cancelled() or ready.exception() is not None:
            return None
        return ready.result()

    async def compute(self, fn: Callable[..., Awaitable[T]], engine: AsyncEngine, /, **kwargs: Any) -> T:
        """`await fn(engine, **kwargs)`, in the worker where it runs, else here on `engine`."""
        if self.pid is None:
            self._start()
            return await fn(engine, **kwargs)
        assert self._pool is not None
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, _compute, fn, kwargs)
        except BrokenProcessPool:
            log.warning("stats.figures_process_lost", replaced_at="the next ask")
            self._drop()
            return await fn(engine, **kwargs)
        except ProxyError:  # the figures' own answer (a bad parameter): the same here
            raise
        except Exception as exc:
            # The worker failed where the proxy may not (it cannot open the store, say): asked here again, and
            # where that answers, the figures stay here from now on.
            result = await fn(engine, **kwargs)
            log.warning("stats.figures_process_unavailable", error=f"{type(exc).__name__}: {exc}"[:500])
            self._given_up = True
            self._drop()
            return result

    async def close(self) -> None:
        self._given_up = True
        self._drop()

    def _start(self) -> None:
        if self._given_up or (self._ready is not None and not self._ready.done()):
            return
        self._drop()
        try:
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=start_worker, initargs=(self._db_url,))
            ready = asyncio.get_running_loop().run_in_executor(self._pool, os.getpid)
        # No process to be had: limits, a closing interpreter, no working sem_open (a container without /dev/shm).
        except (OSError, RuntimeError, ImportError, NotImplementedError) as exc:
            log.warning("stats.figures_process_unavailable", error=str(exc))
            self._given_up = True
            return
        self._ready = ready
        ready.add_done_callback(self._started)

    def _started(self, ready: asyncio.Future[int]) -> None:
        if ready.cancelled():
            return
        if (exc := ready.exception()) is not None:
            # A worker that cannot even start will not start next time either: the figures stay here.
            log.warning("stats.figures_process_unavailable", error=f"{type(exc).__name__}: {exc}")
            self._given_up = True
            self._drop()
            return
        log.info("stats.figures_process_started", pid=ready.result())

    def _drop(self) -> None:
        pool, self._pool = self._pool, None
        ready, self._ready = self._ready, None
        if ready is not None and not ready.done():
            ready.cancel()
        if pool is not None:
            # The pool's processes, read before `shutdown` forgets them: shut down without waiting, the pool only
            # asks its worker to stop after its current figure, and a proxy that exits meanwhile must not leave
            # it running. What it computes has no one to go to any more.
            processes = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    process.terminate()
