"""Where the store writer's transactions run.

On a backend with a faster blocking driver (`Backend.writer_engine`: SQLite's sqlite3), each transaction runs
whole in one thread of the writer's own, one hop there and back; elsewhere it runs on the async engine (the
same function, through `run_sync`). The writer is the only one to write, so one thread serialises nothing
that was not serial already.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.store.dialect import backend_of

__all__ = ["WriterLane"]

P = ParamSpec("P")
T = TypeVar("T")


class WriterLane:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._sync: Engine | None = backend_of(engine).writer_engine(engine)
        self._thread: ThreadPoolExecutor | None = None
        self._conn: Connection | None = None  # the lane thread's own, held between transactions

    async def run(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(connection, ...)` in one transaction, committed when it returns, rolled back when it raises."""
        if self._sync is None:
            async with self._engine.begin() as conn:
                return await conn.run_sync(fn, *args, **kwargs)
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="store-writer")
        sync = self._sync

        def transaction() -> T:
            # A connection held open: checking one out of the pool and back for every transaction cost as
            # much as the statements of a small one. After a failure the next transaction opens another.
            if self._conn is None:
                self._conn = sync.connect()
            try:
                with self._conn.begin():
                    return fn(self._conn, *args, **kwargs)
            except BaseException:
                self._drop_connection()
                raise

        return await asyncio.get_running_loop().run_in_executor(self._thread, transaction)

    async def close(self) -> None:
        """Close the lane's connection; a later `run` opens another."""
        if self._thread is not None and self._sync is not None:
            thread, self._thread, sync = self._thread, None, self._sync

            def close() -> None:
                self._drop_connection()
                sync.dispose()

            await asyncio.get_running_loop().run_in_executor(thread, close)
            thread.shutdown(wait=False)

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection is dropped all the same
                conn.close()
