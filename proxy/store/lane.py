"""Where the store writer's transactions run.

On a backend with a faster blocking driver (`Backend.writer_engine`: SQLite's sqlite3), each transaction runs
whole in one thread of the writer's own, one hop there and back; elsewhere it runs on the async engine (the
same function, through `run_sync`). The writer is the only one to write, so one thread serialises nothing
that was not serial already.

`run_here_if_idle` and `try_here` (SQLite's releases) run the transaction at once on the calling thread, the event
loop's, where the lane's thread is idle and no other connection is writing: the hop to the thread and back, and the
wait for a busy loop to take the result back, were most of a release's wait. It never waits there for the database:
the connection's busy_timeout is 0 at rest, and only the thread's transactions set one for their own length. Another
writer sends the transaction to the thread, as `run`. The lane's connection does not
checkpoint the WAL as it commits (a checkpoint copies megabytes and syncs the file, on the loop): the thread
checkpoints every `_CHECKPOINT_EVERY` commits made on the loop, on a connection and a thread of its own, so
that commits go on meanwhile, on the loop and in the lane's thread.

Several processes writing one SQLite file (`serve --workers N`) take turns through a lock file beside it
(`_WriterLock`, an flock): a transaction on the loop only tries it, as it tries the database; one in the thread
waits for it, and the kernel wakes it the moment the holder lets go. Left to SQLite, a writer that finds the
database locked sleeps in its busy handler, 1, 2, 5, 10 ms and more between tries, whenever the lock is freed.

`run_statement` sends one statement, its own transaction, on a connection of the async engine's that the lane
holds between statements: asyncpg's own, so that the statement costs one round trip (no BEGIN or COMMIT, no pool
checkout with its ping) and no hop through SQLAlchemy's greenlet (proxy/store/audit_statement.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from proxy.logs import get_logger
from proxy.store.dialect import BUSY_TIMEOUT_MS, backend_of

__all__ = ["WriterLane"]

log = get_logger("proxy.store.lane")

# Commits made on the loop between two checkpoints of the WAL by the lane's thread: SQLite's own default is a
# checkpoint per 1,000 pages, a few hundred small transactions.
_CHECKPOINT_EVERY = 200

P = ParamSpec("P")
T = TypeVar("T")


class _WriterLock:
    """The writers' turn on one SQLite file, across processes: an exclusive flock on `<file>-writer.lock`. Taken
    with the lane's own thread lock held, so one process's threads never share a turn (flock is per open file)."""

    def __init__(self, database: str) -> None:
        self._path = f"{database}-writer.lock"
        self._fd: int | None = None

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        return self._fd

    def try_acquire(self) -> bool:
        try:
            fcntl.flock(self._file(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError:  # no lock to be had here (a read-only directory): SQLite's own locking serialises
            return True
        return True

    def acquire(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._file(), fcntl.LOCK_EX)

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _writer_lock(engine: AsyncEngine) -> _WriterLock | None:
    url = engine.url
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:" \
            or url.database.startswith("file:"):
        return None
    return _WriterLock(url.database)


class WriterLane:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._sync: Engine | None = backend_of(engine).writer_engine(engine)
        self._turn = _writer_lock(engine) if self._sync is not None else None
        self._thread: ThreadPoolExecutor | None = None
        # Checkpoints run on a thread of their own: queued on the lane's, a transaction sent there (a release the
        # loop could not run, a large rollup step) waited for a checkpoint's copying.
        self._checkpoints: ThreadPoolExecutor | None = None
        self._conn: Connection | None = None  # the lane thread's own, held between transactions
        self._held: tuple[AsyncConnection, Any] | None = None  # run_statement's, with its driver connection
        self._using = threading.Lock()  # held while a transaction runs on `_conn`, in whichever thread
        self._since_checkpoint = 0  # commits made on the loop since the thread last checkpointed
        self._checkpointer: Connection | None = None  # the thread's connection for checkpoints (`_checkpoint`)

    async def run(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(connection, ...)` in one transaction, committed when it returns, rolled back when it raises."""
        if self._sync is None:
            async with self._engine.begin() as conn:
                return await conn.run_sync(fn, *args, **kwargs)
        thread = self._executor()
        sync = self._sync

        def transaction() -> T:
            with self._using, self._taking_turn():
                conn = self._connection(sync)
                driver = conn.connection.driver_connection
                assert driver is not None
                try:
                    driver.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")  # here the thread may wait
                    with conn.begin():
                        return fn(conn, *args, **kwargs)
                except BaseException:
                    self._drop_connection()
                    raise
                finally:
                    if self._conn is not None:
                        with contextlib.suppress(Exception):
                            driver.execute("PRAGMA busy_timeout=0")

        return await asyncio.get_running_loop().run_in_executor(thread, transaction)

    async def run_here_if_idle(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args,
                               **kwargs: P.kwargs) -> T:
        """`run`, on the calling thread where the lane is idle and the database free (SQLite), else as `run`."""
        done, result = self.try_here(fn, *args, **kwargs)
        if not done:
            return await self.run(fn, *args, **kwargs)
        return result  # type: ignore[return-value]

    def try_here(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args,
                 **kwargs: P.kwargs) -> tuple[bool, T | None]:
        """(True, what `fn` returned) where it ran in a transaction of its own on the calling thread: the lane idle
        and the database free (SQLite). (False, None) where it did not run (rolled back when the database was
        busy); raises what the transaction raised otherwise."""
        sync = self._sync
        if sync is None or not self._using.acquire(blocking=False):
            return False, None
        turn = self._turn
        if turn is not None and not turn.try_acquire():  # another process writes: the thread waits its turn
            self._using.release()
            return False, None
        try:
            done, result = self._here(sync, fn, *args, **kwargs)
        finally:
            if turn is not None:
                turn.release()
            self._using.release()
        if done:
            self._since_checkpoint += 1
            if self._since_checkpoint >= _CHECKPOINT_EVERY:
                self._since_checkpoint = 0
                if self._checkpoints is None:
                    self._checkpoints = ThreadPoolExecutor(1, thread_name_prefix="store-writer-checkpoint")
                self._checkpoints.submit(self._checkpoint)
        return done, result

    def _here(self, sync: Engine, fn: Callable[Concatenate[Connection, P], T], *args: P.args,
              **kwargs: P.kwargs) -> tuple[bool, T | None]:
        conn = self._connection(sync)  # busy_timeout 0 (`_connection`): a lock held elsewhere never holds the loop
        try:
            with conn.begin():
                return True, fn(conn, *args, **kwargs)
        except Exception as exc:
            if _busy(exc):  # rolled back: another connection is writing, so the thread waits for it
                return False, None
            self._drop_connection()
            raise
        except BaseException:
            self._drop_connection()
            raise

    @contextlib.contextmanager
    def _taking_turn(self) -> Iterator[None]:
        turn = self._turn
        if turn is None:
            yield
            return
        turn.acquire()
        try:
            yield
        finally:
            turn.release()

    def _executor(self) -> ThreadPoolExecutor:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="store-writer")
        return self._thread

    def _connection(self, sync: Engine) -> Connection:
        # Held open: checking one out of the pool and back for every transaction cost as much as the statements
        # of a small one. After a failure the next transaction opens another.
        if self._conn is None:
            self._conn = sync.connect()
            driver = self._conn.connection.driver_connection
            assert driver is not None
            driver.execute("PRAGMA wal_autocheckpoint=0")  # `_checkpoint`, in the thread
            # At rest it never waits for a lock: a transaction on the loop (`_here`) must not hold it. The
            # thread's transactions wait (`run`), setting the timeout for their own length.
            driver.execute("PRAGMA busy_timeout=0")
        return self._conn

    def _checkpoint(self) -> None:
        # On a connection of its own, not the lane's: a checkpoint copies megabytes of the WAL into the database
        # file, and SQLite lets a writer commit meanwhile, so a release on the loop does not wait for it.
        sync = self._sync
        if sync is None:
            return
        try:
            if self._checkpointer is None:
                self._checkpointer = sync.connect()
            driver = self._checkpointer.connection.driver_connection
            assert driver is not None
            driver.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except Exception as exc:  # the next one copies what this one left
            log.warning("store.checkpoint_failed", error=f"{type(exc).__name__}: {exc}"[:300])
            self._drop_checkpointer()

    def _drop_checkpointer(self) -> None:
        conn, self._checkpointer = self._checkpointer, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection is dropped all the same
                conn.close()

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
        checkpoints, self._checkpoints = self._checkpoints, None
        if checkpoints is not None:  # the one running finishes first: its connection is closed below
            await asyncio.get_running_loop().run_in_executor(None, checkpoints.shutdown, True)
        if self._sync is not None and (self._thread is not None or self._conn is not None):
            thread, self._thread, sync = self._executor(), None, self._sync

            def close() -> None:
                with self._using:
                    self._drop_connection()
                    self._drop_checkpointer()
                    sync.dispose()
                    if self._turn is not None:
                        self._turn.close()

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


def _busy(exc: BaseException) -> bool:
    """Whether SQLite refused for a lock another connection holds (SQLITE_BUSY or SQLITE_LOCKED, any extended code)."""
    orig = getattr(exc, "orig", None) or exc
    code = getattr(orig, "sqlite_errorcode", None)
    return isinstance(orig, sqlite3.OperationalError) and code is not None and code & 0xFF in (
        sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _refused(exc: BaseException) -> bool:
    """Whether the statement was refused (by the server, or a value asyncpg cannot encode) with its connection
    still ready for the next: a row at fault."""
    import asyncpg  # type: ignore[import-untyped]  # only the Postgres lane runs statements of its own

    return isinstance(exc, asyncpg.PostgresError | asyncpg.DataError)
