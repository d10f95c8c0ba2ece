"""Latency percentiles from counts per logarithmic bin, so that they can be summed over hours.

A value v > 0 falls in bin ceil(log_gamma(v)) with gamma = (1 + a) / (1 - a): any value of a bin is within a
relative `a` (1%) of the bin's representative (the DDSketch mapping). Each bin also keeps the smallest and
largest value it saw; a percentile that lands on a bin's first or last value is that value exactly, and
otherwise the representative, clamped to what the bin saw. Sparse data (a test, a quiet hour) is exact;
dense data is within 1%.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["RELATIVE_ACCURACY", "ZERO_BIN", "Bin", "bin_of", "merge_bin", "percentile", "sketch"]

RELATIVE_ACCURACY = 0.01
_GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA = math.log(_GAMMA)
# Zero and negative durations (a clock step) share one bin below every other.
ZERO_BIN = -(2**31) + 1


@dataclass(slots=True)
class Bin:
    count: int
    low: float
    high: float


def bin_of(value: float) -> int:
    if value <= 1e-9:
        return ZERO_BIN
    return math.ceil(math.log(value) / _LOG_GAMMA)


def merge_bin(bins: dict[int, Bin], index: int, count: int, low: float, high: float) -> None:
    if (found := bins.get(index)) is None:
        bins[index] = Bin(count, low, high)
        return
    found.count += count
    found.low = min(found.low, low)
    found.high = max(found.high, high)


def _value(index: int, found: Bin, place: int) -> float:
    """The value of rank `place` (1-based) among the bin's values."""
    if place == 1 or found.low == found.high or index == ZERO_BIN:
        return found.low
    if place == found.count:
        return found.high
    representative = 2 * _GAMMA**index / (_GAMMA + 1)
    return min(max(representative, found.low), found.high)


def percentile(bins: Mapping[int, Bin], percent: int) -> float | None:
    """Nearest rank: the value of rank ceil(percent/100 * n), as the exact SQL over the rows had it."""
    total = sum(b.count for b in bins.values())
    if total == 0:
        return None
    rank = (total * percent + 99) // 100
    seen = 0
    for index in sorted(bins):
        if seen + bins[index].count >= rank:
            return _value(index, bins[index], rank - seen)
        seen += bins[index].count
    raise AssertionError("unreachable: the ranks stop at the total")


def sketch(values: Iterable[float]) -> dict[int, Bin]:
    """The bins of some values."""
    bins: dict[int, Bin] = {}
    for v in values:
        merge_bin(bins, bin_of(v), 1, v, v)
    return bins

