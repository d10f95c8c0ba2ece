"""One figures' process for all the workers of `serve --workers N`.

A `FiguresProcess` per worker would be N processes of the same figures over the same store, each tens of
megabytes, each started as soon as a dashboard's round-robin polling reached its worker. Instead the parent holds
the one `FiguresProcess` and answers its workers' asks over a Unix socket in its private directory (mode 0700:
only this user reaches it): a worker's `FiguresClient` sends the figure function (a module-level coroutine, pickled
by name) and its plain keyword arguments, and gets back its result, or the `ProxyError` it raised (a bad
parameter), as the function would have. Where the parent cannot be asked (it is gone, the socket is not there
yet) the worker computes the figure itself, as a `FiguresProcess` does while its worker starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import struct
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.errors import ProxyError
from proxy.logs import get_logger
from proxy.stats.figures_process import FiguresProcess

__all__ = ["FiguresClient", "FiguresRelay"]

log = get_logger("proxy.stats.figures_relay")

T = TypeVar("T")
_LENGTH = struct.Struct("!Q")
# A figure that takes longer than this is computed by the worker itself (the parent may be stuck).
_ASK_SECONDS = 120.0


async def _send(writer: asyncio.StreamWriter, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    writer.write(_LENGTH.pack(len(data)) + data)
    await writer.drain()


async def _receive(reader: asyncio.StreamReader) -> Any:
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    return pickle.loads(await reader.readexactly(length))  # from this user's own processes only (a 0700 directory)


class FiguresRelay:
    """The parent's side: one `FiguresProcess`, asked by every worker through `path`."""

    def __init__(self, path: str, db_url: str, engine: AsyncEngine) -> None:
        self.path = path
        self._figures = FiguresProcess(db_url)
        self._engine = engine  # where a figure is computed while the figures' process starts
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._answer, path=self.path)
        os.chmod(self.path, 0o600)

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        await self._figures.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            fn, kwargs = await _receive(reader)
            try:
                reply: tuple[str, Any] = ("ok", await self._figures.compute(fn, self._engine, **kwargs))
            except ProxyError as exc:
                reply = ("raise", exc)
            except Exception as exc:  # the worker computes it itself
                log.warning("stats.figures_relay_failed", error=f"{type(exc).__name__}: {exc}"[:500])
                reply = ("failed", None)
            try:
                await _send(writer, reply)
            except (pickle.PicklingError, TypeError, AttributeError):
                await _send(writer, ("failed", None))
        except (OSError, EOFError, asyncio.IncompleteReadError, pickle.UnpicklingError):
            pass  # the worker went away, or sent something that is not an ask: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


class FiguresClient:
    """A worker's side: `compute` as `FiguresProcess.compute`, in the parent's figures process."""

    def __init__(self, path: str) -> None:
        self.path = path

    async def compute(self, fn: Callable[..., Awaitable[T]], engine: AsyncEngine, /, **kwargs: Any) -> T:
        try:
            async with asyncio.timeout(_ASK_SECONDS):
                reader, writer = await asyncio.open_unix_connection(self.path)
                try:
                    await _send(writer, (fn, kwargs))
                    kind, value = await _receive(reader)
                finally:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()
        except (OSError, EOFError, TimeoutError, asyncio.IncompleteReadError, pickle.UnpicklingError) as exc:
            log.warning("stats.figures_relay_unavailable", error=f"{type(exc).__name__}: {exc}"[:300])
            return await fn(engine, **kwargs)
        if kind == "ok":
            return value
        if kind == "raise" and isinstance(value, ProxyError):
            raise value
        return await fn(engine, **kwargs)

    async def close(self) -> None:
        pass
