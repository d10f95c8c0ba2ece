"""Where the store writer's transactions run.

On a backend with a faster blocking driver (`Backend.writer_engine`: SQLite's sqlite3), each transaction runs
whole in one thread of the writer's own, one hop there and back; elsewhere it runs on the async engine (the
same function, through `run_sync`). The writer is the only one to write, so one thread serialises nothing
that was not serial already.

`run_statement` sends one statement, its own transaction, on a connection of the async engine's that the lane
holds between statements: asyncpg's own, so that the statement costs one round trip (no BEGIN or COMMIT, no pool
checkout with its ping) and no hop through SQLAlchemy's greenlet (proxy/store/audit_statement.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

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
        self._held: tuple[AsyncConnection, Any] | None = None  # run_statement's, with its driver connection

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

    async def run_statement(self, sql: str, args: Sequence[Any]) -> None:
        """One statement (the dialect's SQL, `$n` parameters) outside any transaction: committed when it returns.
        After a failure that may have left the connection unusable the next statement opens another."""
        if self._held is None:
            conn = await self._engine.connect()
            try:
                self._held = (conn, (await conn.get_raw_connection()).driver_connection)
            except BaseException:
                await conn.close()
                raise
        conn, driver = self._held
        try:
            await driver.execute(sql, *args)
        except BaseException as exc:
            if not _refused(exc) or driver.is_closed():
                await self._drop_held(invalidate=True)
            raise

    async def close(self) -> None:
        """Close the lane's connections; a later `run` or `run_statement` opens another."""
        await self._drop_held(invalidate=False)
        if self._thread is not None and self._sync is not None:
            thread, self._thread, sync = self._thread, None, self._sync

            def close() -> None:
                self._drop_connection()
                sync.dispose()

            await asyncio.get_running_loop().run_in_executor(thread, close)
            thread.shutdown(wait=False)

    async def _drop_held(self, *, invalidate: bool) -> None:
        held, self._held = self._held, None
        if held is not None:
            with contextlib.suppress(Exception):  # a broken connection is dropped all the same
                if invalidate:
                    await held[0].invalidate()
                await held[0].close()

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection is dropped all the same
                conn.close()


def _refused(exc: BaseException) -> bool:
    """Whether the statement was refused (by the server, or a value asyncpg cannot encode) with its connection
    still ready for the next: a row at fault."""
    import asyncpg  # type: ignore[import-untyped]  # only the Postgres lane runs statements of its own

    return isinstance(exc, asyncpg.PostgresError | asyncpg.DataError)
