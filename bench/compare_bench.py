"""How fast the model comparison's tests are: Fisher's exact test by size, the permutation test by case.

Fisher is timed against the sum over every table (what it did before issue 28) side by side; the
permutation test on the seed's counts (exact) and on sessions whose p sits at 0.05 (Monte Carlo to its cap).

    python bench/compare_bench.py
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable

from proxy.stats.confidence import fisher_exact, permutation_test


def _every_table(a: int, b: int, c: int, d: int) -> float:
    """The former implementation: every table's probability from log-gammas, summed."""
    row1, col1, total = a + b, a + c, a + b + c + d

    def log_choose(n: int, k: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)

    low, high = max(0, col1 - (total - row1)), min(row1, col1)
    denominator = log_choose(total, col1)

    def log_p(x: int) -> float:
        return log_choose(row1, x) + log_choose(total - row1, col1 - x) - denominator

    bound = log_p(a) + math.log1p(1e-7)
    return min(1.0, sum(math.exp(lp) for x in range(low, high + 1) if (lp := log_p(x)) <= bound))


def _time(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> None:
    print(f"{'calls':>12}  {'every table (s)':>16}  {'fisher_exact (s)':>17}  p")
    for calls in (2_000, 200_000, 2_200_000, 22_000_000):
        half = calls // 2
        table = (round(half * 0.022), half - round(half * 0.022), round(half * 0.098), half - round(half * 0.098))
        before, _ = _time(lambda t=table: _every_table(*t))  # type: ignore[misc]
        after, p = _time(lambda t=table: fisher_exact(*t))  # type: ignore[misc]
        print(f"{calls:>12,}  {before:>16.4f}  {after:>17.6f}  {p:.3g}")
    close = (550_000, 10_450_000, 552_600, 10_447_400)  # 2.2e7 calls, 5.00 % vs 5.02 %: p = 0.011
    before, _ = _time(lambda: _every_table(*close))
    after, p = _time(lambda: fisher_exact(*close))
    print(f"{sum(close):>12,}  {before:>16.4f}  {after:>17.6f}  {p:.6g}")
    calls = lambda k, n: [(1, 1)] * k + [(0, 1)] * (n - k)  # noqa: E731
    seconds, found = _time(lambda: permutation_test(calls(9, 161), calls(19, 158)))
    print(f"permutation, seed's counts one per session: {seconds:.3f} s  {found}")
    rng = random.Random(7)
    first = [(rng.randint(0, 2), rng.randint(1, 6)) for _ in range(40)]
    second = [(rng.randint(0, 2), rng.randint(1, 6)) for _ in range(40)]
    second = [(e + (1 if i < 16 else 0), n) for i, (e, n) in enumerate(second)]
    seconds, found = _time(lambda: permutation_test(first, second))
    print(f"permutation, 80 sessions at p = 0.05: {seconds:.3f} s  {found}")


if __name__ == "__main__":
    main()
