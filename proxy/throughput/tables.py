"""Throughput by concurrency: the seed's three tables, built from plain window records.

A window is one stats interval (vLLM logs one every 10 s) reduced to what the tables need:
how many requests were running, the mean prompt and generation tokens/s over the interval, and
how many requests completed in it. Nothing here knows where windows come from, so the vLLM log
import and the proxy's live windows share one definition of every cell:

- generation throughput at concurrency c: mean `generation_tps` over all windows with
  `running == c`, windows that generated nothing included;
- prefill throughput at c, sustained: mean `prompt_tps` over the same windows; active: mean over
  those of them with `prompt_tps > 0`;
- completed requests per minute at c: completed requests summed over those windows, divided by
  the windows' total length in minutes.

Shown values keep one decimal, halves rounded up, the way a person rounds by hand (210.25 ->
210.3); JSON carries the means rounded to 3 decimals only to drop float noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from proxy.mean import Mean

__all__ = [
    "DEFAULT_WINDOW_SECONDS",
    "Cell",
    "ModelTable",
    "SpecDecode",
    "SpecDecodeBuilder",
    "TableBuilder",
    "Window",
    "build_table",
    "concurrency_levels",
    "format_value",
    "render_markdown",
    "render_text",
    "tables_to_json",
]

DEFAULT_WINDOW_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Window:
    """One stats interval. `completed_requests` is None when nothing counted requests (no access log)."""

    running: int
    prompt_tps: float
    generation_tps: float
    completed_requests: int | None = None
    seconds: float = DEFAULT_WINDOW_SECONDS


@dataclass(kw_only=True, frozen=True, slots=True)
class Cell:
    """One concurrency level of one model; the means are unrounded."""

    concurrency: int
    n: int
    generation_tps: float
    prompt_tps: float
    n_active: int
    prompt_tps_active: float | None
    completed_requests: int | None
    requests_per_minute: float | None


@dataclass(kw_only=True, frozen=True, slots=True)
class SpecDecode:
    """Speculative-decoding acceptance of one model: means over the logged intervals."""

    n: int
    mean_acceptance_length: float | None
    draft_acceptance_rate: float | None  # percent
    accepted_tokens: int | None
    drafted_tokens: int | None


@dataclass(kw_only=True, frozen=True, slots=True)
class ModelTable:
    model: str
    cells: Mapping[int, Cell]  # concurrency >= 1 only; idle windows are counted, not tabled
    windows: int
    idle_windows: int
    spec_decode: SpecDecode | None = None


@dataclass(kw_only=True, slots=True)
class _Sums:
    generation: Mean = field(default_factory=Mean)  # over all windows
    prompt: Mean = field(default_factory=Mean)
    prompt_active: Mean = field(default_factory=Mean)  # over the windows with prefill
    requests: int = 0
    counted_seconds: Mean = field(default_factory=Mean)  # the lengths of the windows that counted requests


@dataclass(slots=True)
class TableBuilder:
    """Accumulates windows one at a time, so neither a long log nor a long-running proxy keeps them."""

    model: str
    _sums: dict[int, _Sums] = field(default_factory=dict)
    _windows: int = 0
    _idle: int = 0

    def add(self, window: Window) -> None:
        self._windows += 1
        if window.running <= 0:
            self._idle += 1
            return
        s = self._sums.setdefault(window.running, _Sums())
        s.generation.add(window.generation_tps)
        s.prompt.add(window.prompt_tps)
        if window.prompt_tps > 0:
            s.prompt_active.add(window.prompt_tps)
        if window.completed_requests is not None:
            s.requests += window.completed_requests
            s.counted_seconds.add(window.seconds)

    def table(self, spec_decode: SpecDecode | None = None) -> ModelTable:
        cells = {c: _cell(c, s) for c, s in sorted(self._sums.items())}
        return ModelTable(model=self.model, cells=cells, windows=self._windows, idle_windows=self._idle,
                          spec_decode=spec_decode)


def _cell(c: int, s: _Sums) -> Cell:
    # A cell exists once a window was added, so the means over all windows have a count.
    seconds = s.counted_seconds
    counted = seconds.n > 0 and seconds.total > 0
    return Cell(
        concurrency=c,
        n=s.generation.n,
        generation_tps=s.generation.total / s.generation.n,
        prompt_tps=s.prompt.total / s.prompt.n,
        n_active=s.prompt_active.n,
        prompt_tps_active=s.prompt_active.value(),
        completed_requests=s.requests if counted else None,
        requests_per_minute=s.requests / (seconds.total / 60) if counted else None,
    )


def build_table(
    model: str, windows: Iterable[Window], *, spec_decode: SpecDecode | None = None
) -> ModelTable:
    builder = TableBuilder(model)
    for w in windows:
        builder.add(w)
    return builder.table(spec_decode)


@dataclass(kw_only=True, slots=True)
class SpecDecodeBuilder:
    """Means over intervals as the seed's author took them; NaN (nothing drafted) is skipped."""

    n: int = 0
    _lengths: list[float] = field(default_factory=list)
    _rates: list[float] = field(default_factory=list)
    _accepted: int = 0
    _drafted: int = 0
    _counted: bool = False

    def add(
        self,
        *,
        mean_acceptance_length: float | None = None,
        draft_acceptance_rate: float | None = None,
        accepted_tokens: int | None = None,
        drafted_tokens: int | None = None,
    ) -> None:
        self.n += 1
        if mean_acceptance_length is not None and math.isfinite(mean_acceptance_length):
            self._lengths.append(mean_acceptance_length)
        if draft_acceptance_rate is not None and math.isfinite(draft_acceptance_rate):
            self._rates.append(draft_acceptance_rate)
        if accepted_tokens is not None and drafted_tokens is not None:
            self._accepted += accepted_tokens
            self._drafted += drafted_tokens
            self._counted = True

    def result(self) -> SpecDecode | None:
        if not self.n:
            return None
        return SpecDecode(
            n=self.n,
            mean_acceptance_length=sum(self._lengths) / len(self._lengths) if self._lengths else None,
            draft_acceptance_rate=sum(self._rates) / len(self._rates) if self._rates else None,
            accepted_tokens=self._accepted if self._counted else None,
            drafted_tokens=self._drafted if self._counted else None,
        )


# --- rendering ---------------------------------------------------------------------------------


def format_value(value: float, places: int = 1) -> str:
    """Half-up rounding; the 9-place step first removes binary noise (85.2+85.3)/2 -> 85.25 exactly."""
    exact = Decimal(f"{value:.9f}")
    return str(exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))


def concurrency_levels(tables: Sequence[ModelTable]) -> range:
    """Rows 1..max over all models, so a level no model reached still shows as a gap."""
    top = max((c for t in tables for c in t.cells), default=0)
    return range(1, top + 1)


def _cell_text(value: float | None, n: int) -> str:
    return "-" if value is None or n == 0 else f"{format_value(value)} ({n})"


_Section = tuple[str, list[str], list[list[str]]]

# The per-concurrency sections: title, and a cell's (value, number of windows behind it).
_CELL_SECTIONS: tuple[tuple[str, Callable[[Cell], tuple[float | None, int]]], ...] = (
    ("Generation throughput (tokens/s): mean per window, idle windows included; (n) windows",
     lambda cell: (cell.generation_tps, cell.n)),
    ("Prefill throughput (tokens/s), sustained: mean over all windows; (n) windows",
     lambda cell: (cell.prompt_tps, cell.n)),
    ("Prefill throughput (tokens/s), active: mean over windows with prefill > 0; (n) active windows",
     lambda cell: (cell.prompt_tps_active, cell.n_active)),
    ("Completed requests per minute: 2xx completions in the windows / their minutes; (n) windows",
     lambda cell: (cell.requests_per_minute, cell.n)),
)


def _sections(tables: Sequence[ModelTable]) -> list[_Section]:
    header = ["Concurrency", *(t.model for t in tables)]
    levels = concurrency_levels(tables)

    def rows(pick: Callable[[Cell], tuple[float | None, int]]) -> list[list[str]]:
        return [[str(c), *(_cell_text(*pick(t.cells[c])) if c in t.cells else "-" for t in tables)]
                for c in levels]

    sections: list[_Section] = [(title, header, rows(pick)) for title, pick in _CELL_SECTIONS]
    specs = [t.spec_decode for t in tables]
    if any(specs):
        sections.append((
            "Speculative decoding: mean over logged intervals; (n) intervals",
            ["", *(t.model for t in tables)],
            [
                ["Mean acceptance length",
                 *(_spec_text(s, s.mean_acceptance_length, 2) if s else "-" for s in specs)],
                ["Draft acceptance rate (%)",
                 *(_spec_text(s, s.draft_acceptance_rate, 1) if s else "-" for s in specs)],
            ],
        ))
    return sections


def _spec_text(spec: SpecDecode, value: float | None, places: int) -> str:
    return "-" if value is None else f"{format_value(value, places)} ({spec.n})"


def render_text(tables: Sequence[ModelTable]) -> str:
    """Aligned plain text: first column left, model columns right-aligned like numbers."""
    if not tables:
        return "No vLLM stats windows found.\n"
    blocks = []
    for title, header, rows in _sections(tables):
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines = [title]
        for r in [header, *rows]:
            cells = [r[0].ljust(widths[0]), *(v.rjust(w) for v, w in zip(r[1:], widths[1:], strict=True))]
            lines.append("  ".join(cells).rstrip())
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def render_markdown(tables: Sequence[ModelTable]) -> str:
    if not tables:
        return "No vLLM stats windows found.\n"
    blocks = []
    for title, header, rows in _sections(tables):
        rule = "|" + "|".join(["---", *("---:" for _ in header[1:])]) + "|"
        lines = [f"**{title}**", "", _md_row(header), rule]
        lines += [_md_row(r) for r in rows]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _num(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def tables_to_json(tables: Sequence[ModelTable]) -> dict[str, Any]:
    """{model: {windows, idle_windows, concurrency: {"c": {...}}, spec_decode}}; keys are strings for JSON."""
    out: dict[str, Any] = {}
    for t in tables:
        spec = t.spec_decode
        out[t.model] = {
            "windows": t.windows,
            "idle_windows": t.idle_windows,
            "concurrency": {
                str(c): {
                    "generation_tps": _num(cell.generation_tps),
                    "prompt_tps": _num(cell.prompt_tps),
                    "prompt_tps_active": _num(cell.prompt_tps_active),
                    "requests_per_minute": _num(cell.requests_per_minute),
                    "completed_requests": cell.completed_requests,
                    "n": cell.n,
                    "n_active": cell.n_active,
                }
                for c, cell in t.cells.items()
            },
            "spec_decode": None if spec is None else {
                "n": spec.n,
                "mean_acceptance_length": _num(spec.mean_acceptance_length),
                "draft_acceptance_rate": _num(spec.draft_acceptance_rate),
                "accepted_tokens": spec.accepted_tokens,
                "drafted_tokens": spec.drafted_tokens,
            },
        }
    return out
