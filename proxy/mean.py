"""A mean kept as its sum and its count, so that means over any set of parts combine exactly."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Mean"]


@dataclass(slots=True)
class Mean:
    total: float = 0.0
    n: int = 0

    def add(self, value: float) -> None:
        self.total += value
        self.n += 1

    def value(self) -> float | None:
        return self.total / self.n if self.n else None
