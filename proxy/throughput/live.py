"""Live throughput windows: the seed's per-concurrency tables built from the proxy's own traffic.

Time is cut into fixed windows per model (10 s by default, like vLLM's stats interval), aligned to
multiples of the window length in Unix time. Each window gets:

- `running`: the model's requests in flight at the window's end, sampled by a ticker task at the
  boundary - what vLLM logs as `Running: N`;
- `prompt_tokens`: the prompts whose first token arrived in the window (the prefill happened then);
- `generation_tokens`: every request's completion tokens spread over the windows its generation
  interval [first token, end] overlaps, in proportion to the overlap;
- `completed_requests`: requests that ended well in the window.

Token counts are the upstream's usage, known only when a request ends, so a request adds its shares
to windows that may already be written; rows are therefore additive, and the ticker upserts all the
shares gathered since its last tick once per window, never on the request path. A window is sampled
only when the model had something going on in it (requests in flight at its end, or one ending in it),
so an idle proxy writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy import telemetry
from proxy.logs import get_logger
from proxy.record import RequestRecord
from proxy.store.writer import StoreWriter
from proxy.tasks import cancel_and_wait
from proxy.throughput.live_store import (
    LatencyCell,
    latency_percentiles,
    read_windows,
    upsert_windows,
    upsert_windows_sync,
)
from proxy.throughput.tables import (
    DEFAULT_WINDOW_SECONDS,
    Cell,
    ModelTable,
    TableBuilder,
    Window,
    format_value,
    render_markdown,
    render_text,
    tables_to_json,
)

__all__ = ["LiveWindows", "empty_throughput", "live_tables", "live_throughput", "render_live_tables", "spread"]

log = get_logger("proxy.throughput.live")


@dataclass(slots=True)
class _Pending:
    """What one window of one model gained since the last write."""

    running: int | None = None
    prompt_tokens: int = 0
    generation_tokens: float = 0.0
    completed_requests: int = 0

    def merge(self, other: _Pending) -> None:
        if other.running is not None:
            self.running = (self.running or 0) + other.running
        self.prompt_tokens += other.prompt_tokens
        self.generation_tokens += other.generation_tokens
        self.completed_requests += other.completed_requests


def spread(start: float, end: float, tokens: float, seconds: float) -> Iterator[tuple[int, float]]:
    """(window index, share of `tokens`) over the windows that [start, end] overlaps, by overlap."""
    if end <= start:
        yield math.floor(end / seconds), tokens
        return
    span = end - start
    first, last = math.floor(start / seconds), math.floor(end / seconds)
    for index in range(first, last + 1):
        overlap = min(end, (index + 1) * seconds) - max(start, index * seconds)
        if overlap > 0:
            yield index, tokens * overlap / span


class LiveWindows:
    """Gathers finished requests into windows and writes them once per window from its own task."""

    def __init__(
        self,
        engine: AsyncEngine,
        in_flight: Mapping[str, int],
        *,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        clock: Callable[[], float] = time.time,
        writer: StoreWriter | None = None,
    ) -> None:
        if window_seconds <= 0:
            raise ValueError(f"window_seconds must be positive (got {window_seconds})")
        self.engine = engine
        # Where the windows are written: in a transaction of the store writer's lane, where there is one. On SQLite
        # a transaction of the async engine hops to its driver's thread and back for each statement, holding the
        # file's write lock meanwhile, so every release that came then waited for it (tens of ms on a busy loop).
        self.writer = writer
        self.in_flight = in_flight  # Services.in_flight: read at each boundary, never written here
        self.seconds = float(window_seconds)
        self._clock = clock
        self._pending: dict[tuple[str, int], _Pending] = {}
        # (model, window index) of requests that ended, so a window with no request left running at its
        # end is still sampled (running 0) when something finished in it.
        self._ended: set[tuple[str, int]] = set()
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.windows_written = 0

    def index(self, t: float) -> int:
        return math.floor(t / self.seconds)

    # -- the request path: plain dictionary updates

    def observe(self, record: RequestRecord) -> None:
        """Services listener: one finished request's shares of its windows."""
        try:
            self._observe(record)
        except Exception as exc:  # a statistic must never break the request that fed it
            log.error("throughput.observe_failed", error=str(exc), request_id=record.id)

    def _observe(self, record: RequestRecord) -> None:
        model = record.model
        end = record.started_at + (record.duration_ms or 0.0) / 1000.0
        first = end if record.ttft_ms is None else min(end, record.started_at + record.ttft_ms / 1000.0)
        end_index = self.index(end)
        self._ended.add((model, end_index))
        if record.usage.seen:
            if record.usage.prompt_tokens:
                self._window(model, self.index(first)).prompt_tokens += record.usage.prompt_tokens
            if record.usage.completion_tokens:
                for index, share in spread(first, end, record.usage.completion_tokens, self.seconds):
                    self._window(model, index).generation_tokens += share
        if record.outcome == "ok" and (record.status is None or record.status < 400):
            self._window(model, end_index).completed_requests += 1

    def _window(self, model: str, index: int) -> _Pending:
        key = (model, index)
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = _Pending()
        return pending

    # -- the ticker

    def sample(self, index: int) -> None:
        """Record `running` for window `index`, which has just ended."""
        models = {m for m, n in self.in_flight.items() if n > 0}
        ended = {key for key in self._ended if key[1] <= index}
        self._ended -= ended
        models |= {m for m, i in ended if i == index}
        for model in models:
            self._window(model, index).running = self.in_flight.get(model, 0)

    async def write(self) -> None:
        """Upsert everything gathered so far; on failure keep it for the next tick."""
        if not self._pending:
            return
        batch, self._pending = self._pending, {}
        rows = [{
            "model": model, "window_start": index * self.seconds, "seconds": self.seconds,
            "running": p.running, "prompt_tokens": p.prompt_tokens, "generation_tokens": p.generation_tokens,
            "completed_requests": p.completed_requests,
        } for (model, index), p in sorted(batch.items())]
        try:
            if self.writer is not None:
                await self.writer.transaction(upsert_windows_sync, rows)
            else:
                async with self.engine.begin() as conn:
                    await upsert_windows(conn, rows)
        except (SQLAlchemyError, OSError, sqlite3.Error) as exc:
            telemetry.emit(telemetry.StoreWriteFailed())
            log.error("throughput.write_failed", error=str(exc), windows=len(rows))
            for key, p in batch.items():  # shares that arrived meanwhile are added, not lost
                self._window(*key).merge(p)
            return
        self.windows_written += len(rows)

    async def _run(self) -> None:
        index = self.index(self._clock())  # the window running now
        while True:
            boundary = (index + 1) * self.seconds
            while (delay := boundary - self._clock()) > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)
                if self._stopping.is_set():
                    return
            # After a stall longer than a window only the last ended window is sampled: the in-flight
            # count of the windows in between is unknown, and a guess would skew their concurrency level.
            now_index = max(index + 1, self.index(self._clock()))
            self.sample(now_index - 1)
            index = now_index
            await self.write()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="throughput-windows")

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop ticking and write the shares gathered so far; the open window stays unsampled."""
        if self._task is not None:
            # Asked, not cancelled: a write cut off halfway would lose the shares it had taken.
            self._stopping.set()
            try:
                await asyncio.wait_for(self._task, timeout)
            except TimeoutError:
                log.error("throughput.stop_timeout")
                await cancel_and_wait(self._task)
            self._task = None
        await self.write()


# -- reading ----------------------------------------------------------------------------------------------


async def live_tables(
    engine: AsyncEngine, *, model: str | None = None, since: float | None = None, until: float | None = None
) -> tuple[list[ModelTable], dict[str, dict[int, LatencyCell]], dict[str, list[float]]]:
    """The tables per model, the latency percentiles per model and concurrency, and the window lengths seen."""
    async with engine.connect() as conn:
        rows = await read_windows(conn, model=model, since=since, until=until)
        latency = await latency_percentiles(conn, model=model, since=since, until=until)
    builders: dict[str, TableBuilder] = {}
    lengths: dict[str, set[float]] = {}
    for row in rows:
        builder = builders.get(row.model) or builders.setdefault(row.model, TableBuilder(row.model))
        builder.add(Window(
            running=row.running, prompt_tps=row.prompt_tokens / row.seconds,
            generation_tps=row.generation_tokens / row.seconds, completed_requests=row.completed_requests,
            seconds=row.seconds,
        ))
        lengths.setdefault(row.model, set()).add(row.seconds)
    for name in latency:  # latency without windows yet (the first window is still open): an empty table
        builders.setdefault(name, TableBuilder(name))
    tables = [builders[name].table() for name in sorted(builders)]
    return tables, latency, {name: sorted(s) for name, s in lengths.items()}


def _latency_json(cells: Mapping[int, LatencyCell]) -> dict[str, dict[str, Any]]:
    def num(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    return {str(c): {
        "requests": cell.requests,
        "ttft_ms_p50": num(cell.ttft_ms_p50), "ttft_ms_p99": num(cell.ttft_ms_p99),
        "tpot_ms_p50": num(cell.tpot_ms_p50), "tpot_ms_p99": num(cell.tpot_ms_p99),
    } for c, cell in sorted(cells.items())}


def empty_throughput() -> dict[str, Any]:
    """What `live_throughput` gives a model that has no window and no latency yet."""
    return {"windows": 0, "idle_windows": 0, "concurrency": {}, "spec_decode": None, "window_seconds": [],
            "latency": {}}


async def live_throughput(
    engine: AsyncEngine, *, model: str | None = None, since: float | None = None, until: float | None = None
) -> dict[str, dict[str, Any]]:
    """model -> `tables_to_json`'s object plus `window_seconds` and `latency` ({concurrency: percentiles}).

    Windows count when they start in [since, until); latency uses the requests started in it. The
    concurrency of a window is the sampled `running`; that of a latency cell is the requests in flight
    when the request started, itself included.
    """
    tables, latency, lengths = await live_tables(engine, model=model, since=since, until=until)
    out = tables_to_json(tables)
    for name, entry in out.items():
        entry["window_seconds"] = lengths.get(name, [])
        entry["latency"] = _latency_json(latency.get(name, {}))
    return out


# -- text -------------------------------------------------------------------------------------------------


def _table_from_json(model: str, entry: Mapping[str, Any]) -> ModelTable:
    cells = {}
    for key, c in (entry.get("concurrency") or {}).items():
        level = int(key)
        cells[level] = Cell(
            concurrency=level, n=c["n"], generation_tps=c["generation_tps"], prompt_tps=c["prompt_tps"],
            n_active=c["n_active"], prompt_tps_active=c["prompt_tps_active"],
            completed_requests=c["completed_requests"], requests_per_minute=c["requests_per_minute"],
        )
    return ModelTable(model=model, cells=dict(sorted(cells.items())), windows=entry.get("windows", 0),
                      idle_windows=entry.get("idle_windows", 0))


def _latency_text(cell: Mapping[str, Any] | None, kind: str) -> str:
    if not cell or cell.get(f"{kind}_ms_p50") is None:
        return "-"
    p99 = cell.get(f"{kind}_ms_p99")
    return (f"{format_value(cell[f'{kind}_ms_p50'])} / {'-' if p99 is None else format_value(p99)}"
            f" ({cell['requests']})")


def _aligned(title: str, header: list[str], rows: list[list[str]], markdown: bool = False) -> str:
    if markdown:
        rule = "|" + "|".join(["---", *("---:" for _ in header[1:])]) + "|"
        return "\n".join([f"**{title}**", "", _md_line(header), rule, *(_md_line(r) for r in rows)])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [title]
    for r in [header, *rows]:
        lines.append("  ".join([r[0].ljust(widths[0]), *(v.rjust(w) for v, w in zip(r[1:], widths[1:],
                                                                                      strict=True))]).rstrip())
    return "\n".join(lines)


def _md_line(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def render_live_tables(result: Mapping[str, Mapping[str, Any]], *, markdown: bool = False) -> str:
    """`live_throughput`'s result as aligned text (or Markdown): the seed's tables, then TTFT and TPOT per
    concurrency."""
    tables = [_table_from_json(name, entry) for name, entry in sorted(result.items())]
    if not any(t.windows for t in tables) and not any(e.get("latency") for e in result.values()):
        return "No live throughput windows recorded yet.\n"
    text = (render_markdown(tables) if markdown else render_text(tables)) if any(t.cells for t in tables) else ""
    models = sorted(result)
    levels = sorted({int(c) for e in result.values() for c in (e.get("latency") or {})})
    if levels:
        header = ["Concurrency", *models]
        blocks = []
        for kind, title in (("ttft", "Time to first token (ms), p50 / p99; (n) streamed requests, "
                                     "by concurrency at the request's start"),
                            ("tpot", "Time per output token (ms), p50 / p99; (n) streamed requests")):
            rows = [[str(c), *(_latency_text((result[m].get("latency") or {}).get(str(c)), kind) for m in models)]
                    for c in levels]
            blocks.append(_aligned(title, header, rows, markdown))
        text = (text + "\n" if text else "") + "\n\n".join(blocks) + "\n"
    return text
