"""uvicorn's server without its tick: an idle proxy's event loop sleeps until something happens.

`uvicorn.Server.main_loop` wakes every 0.1 s, busy or idle, to see whether a signal asked it to stop and, once a
second, to renew the `date` header. On this kind of machine each wake-up from idle costs ~100 us of CPU: ~1-2 ms
a second of a proxy nobody uses. Here the stop is an event set by the signal (asyncio's own signal handling
wakes the loop) or by anyone setting `should_exit`, and the `date` header is written when a response reads it,
at most once a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
import time
from email.utils import formatdate

import uvicorn
from uvicorn.server import HANDLED_SIGNALS, ServerState, logger

__all__ = ["TicklessServer"]

# How often a stopping server looks whether its connections and tasks have finished (uvicorn: every 0.1 s).
_SETTLE_SECONDS = 0.005


class _DatedState(ServerState):
    """`default_headers` with a `date` renewed when read in a new second (uvicorn's tick renewed it)."""

    def __init__(self, config: uvicorn.Config) -> None:
        self._config = config
        self._second = -1
        self._headers: list[tuple[bytes, bytes]] = []
        super().__init__()

    @property
    def default_headers(self) -> list[tuple[bytes, bytes]]:
        now = int(time.time())
        if now != self._second:
            self._second = now
            date = [(b"date", formatdate(now, usegmt=True).encode())] if self._config.date_header else []
            self._headers = date + self._config.encoded_headers
        return self._headers

    @default_headers.setter
    def default_headers(self, _value: list[tuple[bytes, bytes]]) -> None:
        pass  # computed when read


class TicklessServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        self._exit: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._should_exit = False
        super().__init__(config)
        self.server_state = _DatedState(config)

    @property
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        loop, event = self._loop, self._exit
        if value and loop is not None and event is not None and not loop.is_closed():
            # From a signal handler, another thread or the loop itself alike.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    async def main_loop(self) -> None:
        if self.config.limit_max_requests is not None or self.config.callback_notify is not None:
            await super().main_loop()  # counted or notified every tick: uvicorn's own loop
            return
        self._loop, self._exit = asyncio.get_running_loop(), asyncio.Event()
        installed = self._signals_through_the_loop()
        if not installed and threading.current_thread() is threading.main_thread():
            await super().main_loop()  # a loop without signal handling (Windows): only the tick sees a Ctrl-C
            return
        try:
            if not self.should_exit:
                await self._exit.wait()
        finally:
            for sig in installed:
                self._loop.remove_signal_handler(sig)
                # uvicorn's own handler for the graceful shutdown (a second Ctrl-C forces the exit); its
                # capture_signals puts the original handlers back afterwards.
                signal.signal(sig, self.handle_exit)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown without its fixed waits. uvicorn sleeps 0.1 s after asking the open connections to
        close, then looks every 0.1 s whether they have: an idle keep-alive connection closes on the loop's next
        turn, so a server with nothing in flight stopped a tenth of a second (or two) later than it could; a test
        stops a proxy and its upstream hundreds of times. In-flight requests get the same grace as uvicorn's."""
        logger.info("Shutting down")
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                await self._settle()
        except TimeoutError:
            logger.error("Cancel %s running task(s), timeout graceful shutdown exceeded", len(self.server_state.tasks))
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        if not self.force_exit:
            await self.lifespan.shutdown()

    async def _settle(self) -> None:
        """Until the connections have closed and the tasks have ended (or a second Ctrl-C forces the exit)."""
        said = False
        while (self.server_state.connections or self.server_state.tasks) and not self.force_exit:
            await asyncio.sleep(_SETTLE_SECONDS)
            if not said and (self.server_state.connections or self.server_state.tasks):
                said = True
                logger.info("Waiting for connections and background tasks to finish. (CTRL+C to force quit)")
        for server in self.servers:
            await server.wait_closed()

    def _signals_through_the_loop(self) -> list[int]:
        """uvicorn catches SIGINT/SIGTERM with plain `signal.signal` handlers, which only run once the main
        thread runs Python again: with no tick, not before the next connection. asyncio's handlers wake the
        loop (through its self-pipe) and call `handle_exit` inside it."""
        if threading.current_thread() is not threading.main_thread() or self._loop is None:
            return []  # no signals off the main thread (tests serve from threads and set should_exit)
        installed: list[int] = []
        for sig in HANDLED_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                self._loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
        return installed

    def _on_signal(self, sig: int) -> None:
        self.handle_exit(sig, None)
