"""The writer's lane on SQLite: a release's transaction runs at once on the event loop where the lane is idle and
the database free, and goes to the lane's thread, without ever holding the loop, where another connection writes."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy import Connection, text

from proxy.store import lane as lane_module
from proxy.store.db import create_engine, migrate
from proxy.store.lane import WriterLane


@pytest.fixture
async def lane(tmp_path: Path):
    engine = create_engine(f"sqlite:///{tmp_path / 'lane.db'}")
    await migrate(engine)
    lane = WriterLane(engine)
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE marks (n INTEGER)"))
    yield lane, tmp_path / "lane.db"
    await lane.close()
    await engine.dispose()


def _mark(conn: Connection, n: int) -> int:
    conn.execute(text("INSERT INTO marks (n) VALUES (:n)"), {"n": n})
    return threading.get_ident()


def _count(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM marks").fetchone()[0])


async def test_an_idle_lane_commits_on_the_calling_thread(lane):
    lane, path = lane
    assert await lane.run_here_if_idle(_mark, 1) == threading.get_ident()
    assert _count(path) == 1
    assert await lane.run(_mark, 2) != threading.get_ident()  # `run` still goes to the thread
    assert await lane.run_here_if_idle(_mark, 3) == threading.get_ident()
    assert _count(path) == 3


async def test_another_writer_sends_it_to_the_thread_and_the_loop_never_waits(lane):
    lane, path = lane
    await lane.run_here_if_idle(_mark, 0)  # the lane's connection is open
    locker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    locker.execute("BEGIN IMMEDIATE")
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    asyncio.get_running_loop().call_later(0.5, locker.execute, "COMMIT")
    try:
        ran_in = await lane.run_here_if_idle(_mark, 1)
    finally:
        ticker.cancel()
        locker.close()
    assert ran_in != threading.get_ident()  # waited for the lock in the lane's thread
    assert ticks >= 10  # the loop ran on meanwhile
    assert _count(path) == 2  # the attempt on the loop was rolled back, not committed twice


async def test_the_wal_is_checkpointed_by_the_thread_not_at_the_loops_commits(lane, monkeypatch):
    lane, path = lane
    checkpoints: list[int] = []
    checkpoint = WriterLane._checkpoint

    def counted(self: WriterLane) -> None:
        checkpoints.append(threading.get_ident())
        checkpoint(self)

    monkeypatch.setattr(WriterLane, "_checkpoint", counted)
    monkeypatch.setattr(lane_module, "_CHECKPOINT_EVERY", 5)
    for n in range(12):
        await lane.run_here_if_idle(_mark, n)
    assert await lane.run(lambda conn: conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar()) == 0
    for _ in range(500):  # on a thread of their own: done soon, not before any call returns
        if len(checkpoints) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(checkpoints) == 2 and threading.get_ident() not in checkpoints
    assert _count(path) == 12


async def test_a_checkpoint_copies_the_wal_beside_the_lanes_connection_and_lets_commits_go_on(lane):
    lane, path = lane
    for n in range(20):
        await lane.run_here_if_idle(_mark, n)  # the lane's connection is held from now on
    before = (path.parent / (path.name + "-wal")).stat().st_size
    assert before > 0
    started = asyncio.get_running_loop().time()
    checkpointing = asyncio.get_running_loop().run_in_executor(None, lane._checkpoint)
    await lane.run_here_if_idle(_mark, 20)  # a release meanwhile, on the loop
    await asyncio.wait_for(checkpointing, 5)
    assert asyncio.get_running_loop().time() - started < 5  # it never waited for a connection of the pool
    with sqlite3.connect(path) as db:
        busy, frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0 and copied == frames  # the WAL was copied into the database
    assert _count(path) == 21
