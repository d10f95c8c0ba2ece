"""Audit before release with several processes writing one SQLite file (`serve --workers N`): how long a release
waits for its rows' commit, each process's writer on its own, or one writer process the others hand rows to.

    python bench/writer_processes.py [--processes 2] [--levels 6,32] [--releases 1500] [--rounds 2]

Each level's concurrency is split over the processes (at c=32 and 2 processes, 16 requests in a loop in each), and
each request does what a release does (store_bench.py: queue its journal entry, call and reason rows, wait for the
commit, then queue its final row and pause `--gap-ms`). Designs, interleaved round by round:
  one       one process, the whole concurrency (the reference)
  lock      N processes, each its own writer; they take turns through the writers' lock file (as built)
  busy      N processes, each its own writer, no lock file: SQLite's busy handler (sleeps 1, 2, 5, 10 ms ...)
  pipe      N processes hand their rows over a Unix socket to one writer process, which commits and answers
Printed: the release wait p50/p99 in ms and the calls released per second (all processes together).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import pickle
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_bench import _call, _request

from proxy.store import lane, tables
from proxy.store.db import create_engine, migrate
from proxy.store.writer import StoreWriter

_LENGTH = struct.Struct("!I")
_TABLES = {t.name: t for t in (tables.request_journal, tables.tool_calls, tables.tool_call_reasons, tables.requests)}


async def _send(writer: asyncio.StreamWriter, value: Any) -> None:
    data = pickle.dumps(value)
    writer.write(_LENGTH.pack(len(data)) + data)
    await writer.drain()


async def _receive(reader: asyncio.StreamReader) -> Any:
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    return pickle.loads(await reader.readexactly(length))


class _Handed:
    """What a process of the `pipe` design writes through: its rows to the writer process, an answer back."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.owner = f"pipe:{os.getpid()}"
        self._pool: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def write(self, rows: list[tuple[str, dict[str, Any]]], wait: bool) -> None:
        if not self._pool:
            self._pool.append(await asyncio.open_unix_connection(self.path))
        reader, writer = self._pool.pop()
        try:
            await _send(writer, (rows, wait))
            await _receive(reader)
        finally:
            self._pool.append((reader, writer))


async def _requests(url: str, concurrency: int, total: int, gap: float, socket_path: str | None,
                    busy: bool, barrier: Any) -> list[float]:
    if busy:
        lane._writer_lock = lambda engine: None  # type: ignore[assignment]  # SQLite's busy handler only
    engine = create_engine(url)
    writer: StoreWriter | None = None
    handed: _Handed | None = None
    if socket_path is None:
        writer = StoreWriter(engine)
        await writer.start()
    else:
        handed = _Handed(socket_path)
        for _ in range(concurrency):
            handed._pool.append(await asyncio.open_unix_connection(socket_path))
    owner = writer.owner if writer is not None else handed.owner  # type: ignore[union-attr]
    waits: list[float] = []
    remaining = [total]

    async def one() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            row, reason = _call(len(waits))
            row.update(decision="allow", primary_reason=None, reasons="", shape=None, delivered=True)
            journal = {"id": row["request_id"], "owner": owner, "created_at": time.time(), "row": "{}"}
            started = time.perf_counter()
            if writer is not None:
                writer.put_many([(tables.request_journal, journal), (tables.tool_calls, row),
                                 (tables.tool_call_reasons, reason)])
                await writer.commit(30)
            else:
                await handed.write([("request_journal", journal), ("tool_calls", row),  # type: ignore[union-attr]
                                    ("tool_call_reasons", reason)], True)
            waits.append(time.perf_counter() - started)
            if writer is not None:
                writer.put(tables.requests, _request(row))
            else:
                await handed.write([("requests", _request(row))], False)  # type: ignore[union-attr]
            await asyncio.sleep(gap)

    barrier.wait()  # all processes begin together, imported and connected
    await asyncio.gather(*(one() for _ in range(concurrency)))
    if writer is not None:
        await writer.stop()
    await engine.dispose()
    return waits


def _process(url: str, concurrency: int, total: int, gap: float, socket_path: str | None, busy: bool,
             barrier: Any, out: Any) -> None:
    out.put(asyncio.run(_requests(url, concurrency, total, gap, socket_path, busy, barrier)))


async def _writer_process_main(url: str, path: str, ready: Any) -> None:
    engine = create_engine(url)
    writer = StoreWriter(engine)
    await writer.start()

    async def serve(reader: asyncio.StreamReader, stream: asyncio.StreamWriter) -> None:
        try:
            while True:
                rows, wait = await _receive(reader)
                writer.put_many([(_TABLES[name], row) for name, row in rows])
                if wait:
                    await writer.commit(30)
                await _send(stream, True)
        except (asyncio.IncompleteReadError, ConnectionError):
            stream.close()

    server = await asyncio.start_unix_server(serve, path=path)
    ready.set()
    async with server:
        await asyncio.Event().wait()


def _writer_process(url: str, path: str, ready: Any) -> None:
    asyncio.run(_writer_process_main(url, path, ready))


def _run(design: str, url: str, processes: int, concurrency: int, total: int, gap: float,
         tmp: str) -> tuple[float, float, float]:
    ctx = multiprocessing.get_context("spawn")
    count = 1 if design == "one" else processes
    share = [concurrency // count + (1 if i < concurrency % count else 0) for i in range(count)]
    socket_path = None
    writer_proc = None
    if design == "pipe":
        socket_path = os.path.join(tmp, f"writer-{time.time_ns()}.sock")
        ready = ctx.Event()
        writer_proc = ctx.Process(target=_writer_process, args=(url, socket_path, ready), daemon=True)
        writer_proc.start()
        ready.wait(60)
    out = ctx.Queue()
    barrier = ctx.Barrier(count + 1)
    procs = [ctx.Process(target=_process, args=(url, c, total // count, gap, socket_path, design == "busy",
                                                barrier, out)) for c in share]
    for proc in procs:
        proc.start()
    barrier.wait(300)
    start = time.perf_counter()
    waits = [w for _ in procs for w in out.get(timeout=600)]
    elapsed = time.perf_counter() - start
    for proc in procs:
        proc.join(60)
    if writer_proc is not None:
        writer_proc.kill()
        writer_proc.join(10)
    ordered = sorted(waits)
    return (statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
            len(waits) / elapsed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--levels", default="6,32")
    parser.add_argument("--releases", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--gap-ms", type=float, default=20.0)
    parser.add_argument("--designs", default="one,lock,busy,pipe")
    args = parser.parse_args()
    designs = args.designs.split(",")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {args.processes} processes")
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'writers.db'}"
        engine = create_engine(url)
        asyncio.run(migrate(engine))
        asyncio.run(engine.dispose())
        print(f"{'level':<6} {'design':<6} {'p50 ms':>8} {'p99 ms':>8} {'calls/s':>8}")
        for level in [int(x) for x in args.levels.split(",")]:
            found: dict[str, list[tuple[float, float, float]]] = {d: [] for d in designs}
            for _ in range(args.rounds):
                for design in designs:
                    found[design].append(_run(design, url, args.processes, level, args.releases, args.gap_ms / 1000,
                                              tmp))
            for design in designs:
                p50, p99, rate = (statistics.median(x) for x in zip(*found[design], strict=True))
                print(f"c={level:<4} {design:<6} {p50:8.2f} {p99:8.2f} {rate:8,.0f}")
        print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
