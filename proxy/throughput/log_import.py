"""vLLM server logs -> per-model windows -> the throughput tables.

Each stats line closes one window: its `Running: N` is the window's concurrency and its prompt and
generation tokens/s are the window's. A completion access line belongs to the window of the first
stats line logged after it (the window is the interval between consecutive stats lines); where
both carry comparable timestamps, an access line stamped later than a stats line waits for a
later window, so slightly out-of-order output still bins by time. Access lines after a stream's
last stats line belong to no logged window and are only counted.

Every window counts as `window_seconds` long for requests per minute, as the seed's author
counted them: vLLM computes each line's tokens/s over its logging interval, and the one-second
resolution of its timestamps would only add noise.

A data-parallel server logs one stats line per engine (`Engine 000: ...`, `Engine 001: ...`) at each
logging moment. Those lines make one window of the server: its concurrency is the sum of the
engines' `Running`, its tokens/s the sum of theirs (what vLLM's own "N Engines Aggregated" line
prints), and its completed requests are counted once. A moment ends when an engine already seen in
it logs again or a line is stamped more than half a window after the moment's first (an idle engine
may skip a moment); an "Engines Aggregated" line, where present, stands for the moment alone.

Lines are grouped into streams: one per file and `docker compose` service or `kubectl logs --prefix`
pod/container, so interleaved logs of several servers stay apart. A stream's model is `--model`,
else the served model named in the engine's start-up line, else the compose service or kubectl
pod/container, else the file name. A start-up line closes the previous run: its unlogged window is
kept, and completions still waiting for a window count as unbinned, never for the next run.
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from proxy.throughput.tables import (
    DEFAULT_WINDOW_SECONDS,
    ModelTable,
    SpecDecodeBuilder,
    TableBuilder,
    Window,
)
from proxy.throughput.vllm_log import (
    AccessLine,
    Event,
    Malformed,
    ModelName,
    SpecLine,
    Stamp,
    StatsLine,
    parse_line,
)

__all__ = ["ImportResult", "LineCounts", "LogImport", "Progress"]

# (bytes read, bytes in total or None when unknown, e.g. stdin)
Progress = Callable[[int, int | None], None]

_YEAR = 366 * 86400
_PROGRESS_EVERY = 1 << 20  # bytes between progress callbacks


@dataclass(kw_only=True, slots=True)
class LineCounts:
    total: int = 0
    stats: int = 0
    spec_decode: int = 0
    access: int = 0
    completions: int = 0  # 2xx POSTs to completion endpoints: the ones binned into windows
    completions_failed: int = 0  # non-2xx POSTs to completion endpoints
    completions_unbinned: int = 0  # 2xx completions after a run's last stats line (end of input or a restart)
    model_lines: int = 0
    malformed_stats: int = 0
    malformed_spec_decode: int = 0
    ignored: int = 0  # everything else: other log lines, garbage, undecodable bytes

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ImportResult:
    tables: list[ModelTable]
    lines: LineCounts
    window_seconds: float


@dataclass(slots=True)
class _Segment:
    """A stretch of one stream served by one model (a restart may switch models mid-file)."""

    name: str | None
    windows: list[Window] = field(default_factory=list)
    spec: list[SpecLine] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class _Stream:
    fallback_name: str
    model: str | None  # --model: overrides every name found in the log
    segments: list[_Segment] = field(default_factory=lambda: [_Segment(None)])
    pending: list[Stamp | None] = field(default_factory=list)  # completions awaiting their window
    moment: dict[str, StatsLine] = field(default_factory=dict)  # per engine: the window being logged
    moment_due: int = 0  # completions binned into that window
    moment_stamp: Stamp | None = None  # when its first line was logged
    saw_access_log: bool = False
    year_offset: float = 0.0
    last_vllm_seconds: float | None = None


class LogImport:
    """Feed it lines or files, in any number, then take `result()`."""

    def __init__(self, *, window_seconds: float = DEFAULT_WINDOW_SECONDS) -> None:
        if window_seconds <= 0:
            raise ValueError(f"window_seconds must be > 0 (got {window_seconds!r})")
        self.window_seconds = window_seconds
        self.lines = LineCounts()
        self._streams: dict[tuple[str, str], _Stream] = {}

    def feed(self, lines: Iterable[str], *, origin: str, model: str | None = None) -> None:
        """`origin` names the input (a file path); its name is the model's name of last resort."""
        stem = _name_from_path(origin)
        counts = self.lines
        for line in lines:
            counts.total += 1
            parsed = parse_line(line)
            if parsed is None:
                counts.ignored += 1
                continue
            key = (origin, parsed.source)
            stream = self._streams.get(key)
            if stream is None:
                stream = _Stream(fallback_name=parsed.source or stem, model=model)
                self._streams[key] = stream
            self._apply(stream, parsed.event, self._absolute(stream, parsed.stamp))

    def feed_file(
        self, path: str | Path, *, model: str | None = None, progress: Progress | None = None
    ) -> None:
        """Streams the file ('-' reads stdin, '.gz' is unpacked); bytes that are not UTF-8 are replaced."""
        if str(path) == "-":
            self.feed(_decoded(sys.stdin.buffer, None, progress), origin="stdin", model=model)
            return
        p = Path(path)
        if p.suffix == ".gz":
            # Progress in unpacked bytes has no known total.
            with gzip.open(p, "rb") as f:
                self.feed(_decoded(f, None, progress), origin=str(p), model=model)
            return
        with p.open("rb") as f:
            self.feed(_decoded(f, p.stat().st_size, progress), origin=str(p), model=model)

    def result(self) -> ImportResult:
        """Call after the last feed: completions still waiting for a window then count as unbinned."""
        builders: dict[str, tuple[TableBuilder, SpecDecodeBuilder]] = {}
        for stream in self._streams.values():
            self._close_run(stream)
            first_named = next((s.name for s in stream.segments if s.name), None)
            for seg in stream.segments:
                if not seg.windows and not seg.spec:
                    continue
                # A log cut before the start-up line is taken to be the model it names later.
                name = stream.model or seg.name or first_named or stream.fallback_name
                table, spec = builders.setdefault(name, (TableBuilder(name), SpecDecodeBuilder()))
                for w in seg.windows:
                    # Without an access log a zero would claim "no requests completed": unknown instead.
                    table.add(w if stream.saw_access_log else replace(w, completed_requests=None))
                for s in seg.spec:
                    spec.add(
                        mean_acceptance_length=s.mean_acceptance_length,
                        draft_acceptance_rate=s.draft_acceptance_rate,
                        accepted_tokens=s.accepted_tokens,
                        drafted_tokens=s.drafted_tokens,
                    )
        tables = [t.table(s.result()) for t, s in builders.values()]
        return ImportResult(tables, self.lines, self.window_seconds)

    def _absolute(self, stream: _Stream, stamp: Stamp | None) -> Stamp | None:
        """vLLM stamps have no year: a jump back of more than half a year is taken as New Year."""
        if stamp is None or stamp.clock != "vllm":
            return stamp
        if stream.last_vllm_seconds is not None and stamp.seconds < stream.last_vllm_seconds - _YEAR / 2:
            stream.year_offset += _YEAR
        stream.last_vllm_seconds = stamp.seconds
        return Stamp("vllm", stamp.seconds + stream.year_offset)

    def _apply(self, stream: _Stream, event: Event, stamp: Stamp | None) -> None:
        counts = self.lines
        segment = stream.segments[-1]
        if isinstance(event, StatsLine):
            counts.stats += 1
            if event.engine in stream.moment or _apart(stream.moment_stamp, stamp, self.window_seconds / 2):
                # An idle engine may skip a moment (vLLM logs idle intervals at debug level): a line stamped
                # well after the moment's first starts the next one even when its engine is new to the moment.
                self._log_moment(stream)
            if not stream.moment:
                stream.moment_stamp = stamp
                # The moment's first line decides which completions it closes; later engines' lines
                # of the same moment share that count.
                due = [p for p in stream.pending if not _later(p, stamp)]
                stream.pending = [p for p in stream.pending if _later(p, stamp)]
                stream.moment_due = len(due)
            stream.moment[event.engine] = event
        elif isinstance(event, AccessLine):
            counts.access += 1
            stream.saw_access_log = True
            if event.is_completion:
                if event.ok:
                    counts.completions += 1
                    stream.pending.append(stamp)
                else:
                    counts.completions_failed += 1
        elif isinstance(event, SpecLine):
            counts.spec_decode += 1
            segment.spec.append(event)
        elif isinstance(event, ModelName):
            counts.model_lines += 1
            self._close_run(stream)
            segment = stream.segments[-1]
            if segment.name is None:
                segment.name = event.name
            elif segment.name != event.name:
                stream.segments.append(_Segment(event.name))
        elif isinstance(event, Malformed):
            if event.kind == "stats":
                counts.malformed_stats += 1
            else:
                counts.malformed_spec_decode += 1


    def _log_moment(self, stream: _Stream) -> None:
        """The engines' lines of one logging moment -> one window of the server."""
        if not stream.moment:
            return
        aggregated = stream.moment.get("aggregated")
        lines = [aggregated] if aggregated is not None else list(stream.moment.values())
        stream.segments[-1].windows.append(
            Window(
                sum(line.running for line in lines),
                sum(line.prompt_tps for line in lines),
                sum(line.generation_tps for line in lines),
                stream.moment_due,
                self.window_seconds,
            )
        )
        stream.moment.clear()
        stream.moment_due = 0

    def _close_run(self, stream: _Stream) -> None:
        """End of input or a (re)start: completions not yet in a window belong to no logged window."""
        self._log_moment(stream)
        self.lines.completions_unbinned += len(stream.pending)
        stream.pending.clear()


def _apart(first: Stamp | None, stamp: Stamp | None, seconds: float) -> bool:
    """True when both stamps compare and the second is more than `seconds` after the first."""
    if first is None or stamp is None or first.clock != stamp.clock:
        return False
    return stamp.seconds - first.seconds > seconds


def _later(access: Stamp | None, stats: Stamp | None) -> bool:
    """True when the access line is known to come after the stats line, so it belongs to a later window."""
    return (
        access is not None
        and stats is not None
        and access.clock == stats.clock
        and access.seconds > stats.seconds
    )


def _name_from_path(origin: str) -> str:
    """'logs/Qwen3.5-27B.log.gz' -> 'Qwen3.5-27B'; not Path.stem, which would cut 'Qwen3.5-27B' at its dot."""
    name = Path(origin).name or origin
    for suffix in (".gz", ".log", ".txt"):
        name = name.removesuffix(suffix)
    return name or origin


def _decoded(f: Iterable[bytes], total: int | None, progress: Progress | None) -> Iterator[str]:
    done = 0
    next_report = 0
    for raw in f:
        done += len(raw)
        if progress is not None and done >= next_report:
            progress(done, total)
            next_report = done + _PROGRESS_EVERY
        yield raw.decode("utf-8", "replace").rstrip("\r\n")
    if progress is not None:
        progress(done, total)
