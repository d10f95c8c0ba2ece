"""Requests in flight per model over all the workers of `serve --workers N`.

A request is recorded with the concurrency it started at (the requests of its model in flight, itself included):
what the throughput and latency figures are told apart by. Counted by one worker alone, N workers would record a
fraction of what the upstream serves at once. So each worker counts into its own row of an array the parent shares
with all of them (one writer per cell: no lock), and the concurrency is the column's sum over the rows. A model's
column is its name's CRC-32 modulo the row's width, the same in every process (two models sharing a column are
counted together: with a handful of models served, rarely). The parent clears the row of a worker that exits, so a
killed worker's requests do not stay counted.
"""

from __future__ import annotations

import zlib
from typing import Any

__all__ = ["InFlightBoard"]

SLOTS = 256


class InFlightBoard:
    def __init__(self, cells: Any, workers: int, index: int) -> None:
        self._cells = cells  # a shared array of workers * SLOTS integers (multiprocessing.RawArray)
        self._workers = workers
        self._row = index * SLOTS

    @staticmethod
    def cells(context: Any, workers: int) -> Any:
        """The shared array for `workers` workers (made by the parent, before it starts them)."""
        return context.RawArray("i", workers * SLOTS)

    @staticmethod
    def clear(cells: Any, index: int) -> None:
        """Forget what worker `index` counted (it exited)."""
        start = index * SLOTS
        cells[start:start + SLOTS] = [0] * SLOTS

    def add(self, model: str, delta: int) -> int:
        """Count this worker's requests of `model` by `delta`; the requests of `model` in flight in all workers."""
        column = zlib.crc32(model.encode("utf-8", "surrogatepass")) % SLOTS
        cells = self._cells
        cells[self._row + column] += delta
        return sum(cells[row * SLOTS + column] for row in range(self._workers))
