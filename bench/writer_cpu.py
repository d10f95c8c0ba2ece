"""CPU and wake-ups of the store writer per answer, for this checkout and others, side by side.

    python bench/writer_cpu.py [--answers 20] [--answer-ms 1000] [--against NAME=DIR ...] [--pg URL]

Each answer writes what a streamed answer ending in one allowed call writes through the recorder: at the
release point its session row, its journal entry and the call row, waited for (audit before release); at its
end, nobody waiting, the request's final row and two lineage digests (the recorder before issue 27 queued the
session row again at the end: one statement an answer more, not counted here for either side). Answers follow one
another (c=1, the bench's realistic traffic) `--answer-ms` apart, so the writer's delayed rollup steps share
the rows of as many answers as they would behind a real stream. Printed per answer: the user and system CPU of
the event loop's thread and the `store-writer` thread together (a SQLite release commits on the loop where the
writer's thread is idle; the loop's count holds the bench's own work too, the same for every checkout), their
context switches (mostly wake-ups), and the release wait. `--against` runs the
same answers with another checkout's `proxy` package (the same script, in a process of its own), so a change
is measured against what it replaces in one run. With `--pg URL` (a server whose user may create databases) the
store is a fresh Postgres database, dropped afterwards; there the writer has no thread of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _thread_counters(native_id: int) -> tuple[float, float, float, int]:
    """(CPU s, user s, system s, context switches) of one thread of this process; CPU from the scheduler (ns),
    user and system in clock ticks (10 ms: only their sum over many answers says much)."""
    task = Path(f"/proc/self/task/{native_id}")
    fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    switches = sum(int(line.split()[1]) for line in (task / "status").read_text().splitlines()
                   if "ctxt_switches" in line)
    cpu = int((task / "schedstat").read_text().split()[0]) / 1e9
    return cpu, int(fields[11]) / tick, int(fields[12]) / tick, switches


def _measured_threads() -> list[int]:
    """The event loop's thread and the store writer's, where it has one (SQLite): the writer's work runs in both
    (since session 8 a SQLite release commits on the loop where the lane is idle)."""
    found = [t.native_id for t in threading.enumerate()
             if (t is threading.main_thread() or t.name.startswith("store-writer")) and t.native_id is not None]
    assert found
    return found


def _counters(threads: list[int]) -> tuple[float, ...]:
    return tuple(sum(values) for values in zip(*(_thread_counters(t) for t in threads), strict=True))


Rows = list[tuple[str, dict[str, Any]]]


def _answer_rows(session_id: str, now: float) -> tuple[Rows, Rows]:
    """(rows at the release point, rows at the answer's end), by table name."""
    request_id, call_id = uuid.uuid4().hex, uuid.uuid4().hex
    session = {"id": session_id, "source": "lineage", "model": "qwen3.5-27b", "created_at": now, "project_root": None}
    request = {"id": request_id, "session_id": session_id, "model": "qwen3.5-27b", "route": "chat",
               "upstream": "http://127.0.0.1:8000/v1", "stream": True, "started_at": now - 1.0, "ttfb_ms": 80.0,
               "ttft_ms": 95.0, "duration_ms": 1000.0, "status": 200, "outcome": "ok", "error": None,
               "prompt_tokens": 20_000, "completion_tokens": 300, "cached_tokens": None, "concurrency": 1,
               "attempts": 1, "budget_exhausted": False, "policy_name": "strict", "policy_hash": "0" * 16,
               "mode": "enforce", "profiles": None, "project_root": None, "ungoverned_text": None}
    call = {"id": call_id, "request_id": request_id, "session_id": session_id, "model": "qwen3.5-27b",
            "route": "chat", "attempt": 1, "call_index": 0, "created_at": now, "tool_name": "bash",
            "source": "openai", "arguments_raw": '{"command": "uv run scripts/search.py x"}', "arguments_json": None,
            "command": "uv run scripts/search.py x", "repaired_command": None, "feedback_variant": None,
            "decision": "allow", "primary_reason": None, "reasons": "", "shape": None, "policy_name": "strict",
            "policy_hash": "0" * 16, "mode": "enforce", "delivered": True}
    journal = {"id": request_id, "owner": "bench", "created_at": now, "row": json.dumps(request)}
    lineage = [("session_lineage", {"digest": uuid.uuid4().hex, "session_id": session_id, "created_at": now})
               for _ in range(2)]
    release = [("sessions", session), ("request_journal", journal), ("tool_calls", call)]
    end = [*lineage, ("requests", request)]
    return release, end


async def _measure(answers: int, answer_s: float, pg: str) -> dict[str, float]:
    if not pg:
        with tempfile.TemporaryDirectory() as tmp:
            return await _measure_on(f"sqlite:///{Path(tmp) / 'bench.db'}", answers, answer_s)
    from store_bench import _pg_database  # this script's folder: bench/

    name = f"writer_cpu_{uuid.uuid4().hex[:8]}"
    await _pg_database(pg, True, name)
    try:
        return await _measure_on(f"{pg.rsplit('/', 1)[0]}/{name}", answers, answer_s)
    finally:
        await _pg_database(pg, False, name)


async def _measure_on(url: str, answers: int, answer_s: float) -> dict[str, float]:
    from proxy.store import tables
    from proxy.store.db import create_engine, migrate
    from proxy.store.writer import StoreWriter

    def put(writer: StoreWriter, rows: Rows) -> None:
        writer.put_many([(tables.metadata.tables[name], row) for name, row in rows])

    engine = create_engine(url)
    await migrate(engine)
    writer = StoreWriter(engine)
    await writer.start()
    waits: list[float] = []

    async def answer(i: int) -> None:
        release, end = _answer_rows(f"ses_{i % 4}", time.time())
        put(writer, release)
        started = time.perf_counter()
        await writer.commit(30)
        waits.append(time.perf_counter() - started)
        await asyncio.sleep(answer_s * 0.1)  # the rest of the answer streams after its call is released
        put(writer, end)
        await asyncio.sleep(answer_s * 0.9)  # the next answer's prelude and stream, up to its call

    for i in range(3):  # warm the connection, the statements and the thread
        await answer(i)
    await writer.flush(30)
    threads = _measured_threads()
    before = _counters(threads)
    waits.clear()
    for i in range(answers):
        await answer(i)
    await writer.flush(30)
    after = _counters(threads)
    await writer.stop()
    await engine.dispose()
    cpu, user, system, switches = (b - a for a, b in zip(before, after, strict=True))
    return {"cpu_ms": cpu * 1000 / answers, "user_ms": user * 1000 / answers, "sys_ms": system * 1000 / answers,
            "switches": switches / answers, "wait_ms": statistics.median(waits) * 1000}


def _run_elsewhere(directory: str, answers: int, answer_ms: float, pg: str) -> dict[str, float]:
    """The same measurement with another checkout's `proxy` package, in a process of its own."""
    env = {**os.environ, "PYTHONPATH": directory}
    out = subprocess.run([sys.executable, __file__, "--json", "--answers", str(answers), "--answer-ms",
                          str(answer_ms), "--pg", pg], env=env, cwd=directory, check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--answers", type=int, default=20)
    parser.add_argument("--answer-ms", type=float, default=1000.0, help="one answer's time, call to call")
    parser.add_argument("--against", action="append", default=[], metavar="NAME=DIR",
                        help="also measure the checkout in DIR (its `proxy` package), printed as NAME")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds; the median is printed")
    parser.add_argument("--pg", default="", metavar="URL", help="measure on a fresh database of this Postgres server")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.json:
        print(json.dumps(asyncio.run(_measure(args.answers, args.answer_ms / 1000, args.pg))))
        return
    variants = [("this", str(ROOT)), *(tuple(v.split("=", 1)) for v in args.against)]
    found: dict[str, list[dict[str, float]]] = {name: [] for name, _ in variants}
    for _ in range(args.rounds):
        for name, directory in variants:
            found[name].append(_run_elsewhere(directory, args.answers, args.answer_ms, args.pg))
    where = ("event-loop thread per answer (Postgres)" if args.pg
             else "event-loop and store-writer threads per answer (SQLite)")
    print(f"{where}, {args.answers} answers {args.answer_ms:g} ms apart, c=1")
    print(f"{'':12} {'cpu ms':>7} {'user':>6} {'sys':>6} {'ctxsw':>6} {'release wait p50':>17}")
    for name, runs in found.items():
        m = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"{name:12} {m['cpu_ms']:7.2f} {m['user_ms']:6.2f} {m['sys_ms']:6.2f} {m['switches']:6.1f} "
              f"{m['wait_ms']:14.2f} ms")


if __name__ == "__main__":
    main()
