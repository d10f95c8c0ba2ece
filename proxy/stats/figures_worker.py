"""The figures' worker process, its side (the proxy's side is proxy/stats/figures_process.py).

The worker must never outlive the proxy, however the proxy ends: a graceful stop terminates it, but a
SIGKILLed proxy runs nothing, and a worker left behind (reparented to PID 1) holds its engine and
multiprocessing's resource tracker forever. So the first thing the worker runs, before it imports anything
heavy, ties its life to its parent's twice:
- on Linux, a parent-death signal (`prctl(PR_SET_PDEATHSIG, SIGKILL)`): the kernel kills it when the thread
  that spawned it ends, which in `serve` is the event loop's thread, so when the proxy ends;
- everywhere, a thread that waits on multiprocessing's parent sentinel (a pipe whose other end only the parent
  holds: it reads end-of-file once the parent is gone) and then exits at once.
A parent already gone by then (it died while the worker was starting) is caught by the same sentinel. The
resource tracker needs nothing of its own: it ends when the last process holding its pipe (the proxy and
this worker) has ended.

This module imports only the standard library at the top, so the time from the worker's spawn to these
guards is Python's start and this file.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["compute", "die_with_parent", "start_worker"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# The lowest CPU priority: where the machine is busy, the streams' processes go first and the figures take longer
# (at niceness 10, a busy machine still delayed streams' chunks by ~2.5 ms; at 19 by none).
_NICE = 19

_worker: tuple[asyncio.AbstractEventLoop, AsyncEngine] | None = None


def die_with_parent() -> None:
    """End this process as soon as the process that spawned it ends (see the module's docstring)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return
    if not parent.is_alive():
        os._exit(0)
    threading.Thread(target=_exit_when_gone, args=(parent.sentinel,), name="parent-watch", daemon=True).start()


def _exit_when_gone(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    # Nothing to flush or close: the worker only reads the store, and its parent, who asked, is gone.
    os._exit(0)


def start_worker(db_url: str) -> None:
    """The worker's initializer: tied to its parent first, then its own engine on the proxy's store."""
    global _worker
    die_with_parent()
    # Ctrl-C reaches the whole process group: the proxy shuts its worker down itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(_NICE)
    from proxy.store.db import create_engine

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    engine = create_engine(db_url)
    _worker = (loop, engine)
    # Closed before the worker's exit joins its threads: an open SQLite connection's thread would hold it.
    multiprocessing.util.Finalize(engine, _close_worker, exitpriority=10)


def _close_worker() -> None:
    if _worker is not None:
        loop, engine = _worker
        loop.run_until_complete(engine.dispose())


def compute(fn: Callable[..., Awaitable[Any]], kwargs: dict[str, Any]) -> Any:
    assert _worker is not None
    loop, engine = _worker
    return loop.run_until_complete(fn(engine, **kwargs))
