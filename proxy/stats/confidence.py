"""How sure a rate is: intervals and tests for the stats, in plain Python (no scipy for a few formulas).

- `wilson`: the Wilson score interval of k successes in n trials (Wilson 1927), which stays inside [0, 1]
  and behaves at k = 0 or k = n, unlike the normal approximation.
- `newcombe_difference`: the interval of p1 - p2 from the two Wilson intervals (Newcombe 1998, method 10).
- `fisher_exact`: the two-sided exact test of a 2x2 table (hypergeometric; tables as likely as or less
  likely than the observed one, with R's and scipy's relative tolerance of 1e-7), in constant time at any
  size (Loader's saddle-point log-probabilities; each tail summed outward from its edge).
- `bootstrap_ratio`: a percentile interval of sum(errors)/sum(calls) resampling whole sessions, because the
  calls of one session are not independent (a model that loops contributes many errors at once). Past
  `BOOTSTRAP_MAX_SESSIONS` sessions it gives the cluster-robust normal interval of the same ratio instead
  (what the bootstrap converges to at that size), so `/stats/models` stays fast on a big store.
- `permutation_test`: the two-sided permutation test of the difference of two such ratios, shuffling
  which model each session belongs to: exact over the distinct session counts where they are few, else a
  sequential Monte Carlo that draws until its verdict against alpha is settled (or says it is not); past
  `BOOTSTRAP_MAX_SESSIONS` sessions the z-test of the difference with the same cluster-robust variances.
- p-values never go below `P_FLOOR`; session intervals never collapse to a point (`_never_a_point`).

The resampling is seeded (the permutation test from the data itself) and works on the sessions' counts
sorted, so the same data always gives the same figures.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "P_FLOOR",
    "Z95",
    "PermutationResult",
    "bootstrap_median",
    "bootstrap_ratio",
    "cluster_normal_ratio",
    "fisher_exact",
    "median",
    "newcombe_difference",
    "permutation_difference",
    "permutation_test",
    "wilson",
]

Z95 = 1.959963984540054  # the 97.5th percentile of the standard normal distribution
SEED = 20261203
# Resampling work is bounded (draws x sessions): at most this per figure, with at least MIN_DRAWS draws.
MAX_WORK = 100_000
MIN_DRAWS = 250
BOOTSTRAP_MAX_SESSIONS = MAX_WORK // MIN_DRAWS
Interval = tuple[float, float]
Cluster = tuple[int, int]  # (errors, calls) of one session


def wilson(k: float, n: int, z: float = Z95) -> Interval | None:
    """The Wilson score interval for k of n; None when n is 0."""
    if n <= 0:
        return None
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_difference(k1: int, n1: int, k2: int, n2: int) -> Interval | None:
    """The interval of k1/n1 - k2/n2 (Newcombe's hybrid score interval)."""
    a, b = wilson(k1, n1), wilson(k2, n2)
    if a is None or b is None:
        return None
    p1, p2 = k1 / n1, k2 / n2
    d = p1 - p2
    low = d - math.sqrt((p1 - a[0]) ** 2 + (b[1] - p2) ** 2)
    high = d + math.sqrt((a[1] - p1) ** 2 + (p2 - b[0]) ** 2)
    return low, high


_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
# Stirling's series for n > 15 (Loader 2000, as R's dbinom): no cancellation of huge log-factorials.
_STIRLING = (1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188)
# The smallest p-value reported: below it a p-value is printed as "< 1e-300" and never underflows to 0.0,
# which a reader (or a falsy test) would take for "no p-value".
P_FLOOR = 1e-300


def _stirling_error(n: float) -> float:
    """log(n!) - log(sqrt(2 pi n) (n/e)^n)."""
    if n <= 15:
        return math.lgamma(n + 1) - (n + 0.5) * math.log(n) + n - _HALF_LOG_2PI if n > 0 else 0.0
    s0, s1, s2, s3, s4 = _STIRLING
    nn = n * n
    return (s0 - (s1 - (s2 - (s3 - s4 / nn) / nn) / nn) / nn) / n


def _deviance(x: float, mean: float) -> float:
    """x log(x / mean) + mean - x, summed as a series where the two terms nearly cancel."""
    if abs(x - mean) < 0.1 * (x + mean):
        v = (x - mean) / (x + mean)
        s = (x - mean) * v
        ej = 2 * x * v
        v2 = v * v
        j = 1
        while True:
            ej *= v2
            s1 = s + ej / (2 * j + 1)
            if s1 == s:
                return s1
            s = s1
            j += 1
    return x * math.log(x / mean) + mean - x


def _log_binomial(x: int, n: int, p: float, q: float) -> float:
    """log P(X = x) for X ~ Binomial(n, p), accurate to a few ulps at any n (Loader's saddle point form)."""
    if x == 0:
        return n * math.log(q) if n else 0.0
    if x == n:
        return n * math.log(p)
    lc = (_stirling_error(n) - _stirling_error(x) - _stirling_error(n - x)
          - _deviance(x, n * p) - _deviance(n - x, n * q))
    return lc - 0.5 * (math.log(2 * math.pi) + math.log(x) + math.log1p(-x / n))


def _log_hypergeometric(x: int, row1: int, row2: int, col1: int) -> float:
    """log P(X = x): x of the col1 draws from row1 + row2 items come from row1."""
    total = row1 + row2
    p, q = col1 / total, (total - col1) / total
    return (_log_binomial(x, row1, p, q) + _log_binomial(col1 - x, row2, p, q)
            - _log_binomial(col1, total, p, q))


def _tail_sum(start: int, stop: int, step: int, log_first: float, row1: int, row2: int, col1: int,
              reference: float) -> float:
    """sum of P(X = x) / exp(reference) from start towards stop (inclusive), walking outward from the mode.

    Terms come from the ratio of neighbours, so each costs a few multiplications; the walk stops once a term
    no longer changes the sum (the tail falls faster than geometrically).
    """
    term = math.exp(log_first - reference)
    total = 0.0
    x = start
    while True:
        total += term
        if x == stop or term < total * 1e-17:
            return total
        if step > 0:
            term *= (row1 - x) * (col1 - x) / ((x + 1) * (row2 - col1 + x + 1))
        else:
            term *= x * (row2 - col1 + x) / ((row1 - x + 1) * (col1 - x + 1))
        x += step


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p-value of Fisher's exact test for the table [[a, b], [c, d]].

    The tables as likely as or less likely than the observed one (R's and scipy's relative tolerance of 1e-7)
    form two tails of the unimodal hypergeometric distribution: each is found by bisection and summed outward
    from its edge, so the cost does not grow with the number of calls. Never below `P_FLOOR`.
    """
    row1, row2, col1 = a + b, c + d, a + c
    total = row1 + row2
    if total == 0 or row1 in (0, total) or col1 in (0, total):
        return 1.0
    low, high = max(0, col1 - row2), min(row1, col1)
    mode = min(high, max(low, (row1 + 1) * (col1 + 1) // (total + 2)))

    def log_p(x: int) -> float:
        return _log_hypergeometric(x, row1, row2, col1)

    observed = log_p(a)
    bound = observed + math.log1p(1e-7)
    if log_p(mode) <= bound:
        return 1.0
    # The first x on each side of the mode whose probability is at most the observed one's.
    lo, hi = low - 1, mode  # log_p(lo + 1 .. ) rises towards the mode: find the largest x < mode in the tail
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if log_p(mid) <= bound else (lo, mid)
    left_edge = lo
    lo, hi = mode, high + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if log_p(mid) <= bound else (mid, hi)
    right_edge = hi
    scaled = 0.0
    if left_edge >= low:
        scaled += _tail_sum(left_edge, low, -1, log_p(left_edge), row1, row2, col1, observed)
    if right_edge <= high:
        scaled += _tail_sum(right_edge, high, 1, log_p(right_edge), row1, row2, col1, observed)
    log_value = observed + math.log(scaled) if scaled > 0 else observed
    return min(1.0, max(P_FLOOR, math.exp(log_value))) if log_value > math.log(P_FLOOR) else P_FLOOR


def _ratio(errors: int, calls: int) -> float:
    return errors / calls if calls else 0.0


def _draws(wanted: int, sessions: int) -> int:
    return max(MIN_DRAWS, min(wanted, MAX_WORK // max(1, sessions)))


def _ratio_variance(clusters: Sequence[Cluster]) -> tuple[float, float] | None:
    """The ratio sum(errors)/sum(calls) and its cluster-robust (delta-method) variance over sessions."""
    n = len(clusters)
    calls = sum(c[1] for c in clusters)
    if n < 2 or calls == 0:
        return None
    ratio = sum(c[0] for c in clusters) / calls
    mean_calls = calls / n
    return ratio, sum((e - ratio * m) ** 2 for e, m in clusters) / (n * (n - 1) * mean_calls**2)


def cluster_normal_ratio(clusters: Sequence[Cluster], z: float = Z95) -> Interval | None:
    """The ratio's 95 % interval from its cluster-robust variance (normal approximation)."""
    found = _ratio_variance(clusters)
    if found is None:
        return None
    ratio, variance = found
    half = z * math.sqrt(variance)
    return _never_a_point((max(0.0, ratio - half), min(1.0, ratio + half)), clusters)


def _never_a_point(interval: Interval, clusters: Sequence[Cluster]) -> Interval:
    """An interval that collapsed (every session has the same rate, or one session) widened to Wilson's.

    Resampling sessions that all have one rate only ever gives that rate, but a few sessions cannot make it
    certain. The rule: a collapsed interval becomes the union of itself with the Wilson interval of the rate
    over the sessions (the independent units: fewer than the calls, so the wider of the two Wilson intervals),
    e.g. 13 sessions all recovered give 77.2 - 100 %, none of 13 sessions' calls failing 0 - 22.8 %.
    """
    low, high = interval
    if high > low:
        return interval
    errors = sum(c[0] for c in clusters)
    calls = sum(c[1] for c in clusters)
    n = len(clusters)
    widened = wilson(errors / calls * n, n) if calls else None
    return interval if widened is None else (min(low, widened[0]), max(high, widened[1]))


def bootstrap_ratio(clusters: Sequence[Cluster], *, draws: int = 2000, seed: int = SEED) -> Interval | None:
    """95 % percentile interval of sum(errors) / sum(calls), resampling sessions with replacement."""
    # Sorted, so the figure depends on the sessions' counts only, not the order the store returned them in.
    clusters = sorted(c for c in clusters if c[1] > 0)
    if not clusters:
        return None
    if len(clusters) > BOOTSTRAP_MAX_SESSIONS:
        return cluster_normal_ratio(clusters)
    rng = random.Random(seed)
    errors = [c[0] for c in clusters]
    calls = [c[1] for c in clusters]
    n = len(clusters)
    draws = _draws(draws, n)
    population = range(n)
    rates = []
    for _ in range(draws):
        picked = rng.choices(population, k=n)
        rates.append(_ratio(sum(map(errors.__getitem__, picked)), sum(map(calls.__getitem__, picked))))
    rates.sort()
    return _never_a_point((rates[int(0.025 * (draws - 1))], rates[math.ceil(0.975 * (draws - 1))]), clusters)


@dataclass(frozen=True)
class PermutationResult:
    """A permutation test's p-value and how it was reached.

    `method` is "exact" (every split of the sessions counted), "monte carlo" (random splits, drawn until the
    verdict against `alpha` is settled or the work cap is reached: `settled` False then, and the verdict is
    "undecided") or "normal" (the cluster-robust z-test, past `BOOTSTRAP_MAX_SESSIONS` sessions).
    `mc_error` is the Monte Carlo standard error of `p` (0.0 for the other methods).
    """

    p: float
    method: str
    mc_error: float
    draws: int
    settled: bool


# The exact permutation distribution is counted over distinct session counts while it has at most this many
# states (sessions chosen, errors, calls); beyond, random splits are drawn.
EXACT_MAX_STATES = 20_000
# Monte Carlo: batches of draws until p is further than SETTLE_Z standard errors from alpha (3.5 keeps the
# chance of a wrong verdict over repeated looks well under 0.1 %), at most MAX_PERMUTATION_WORK
# draws x sessions.
DRAW_BATCH = 2000
SETTLE_Z = 3.5
MAX_PERMUTATION_WORK = 4_000_000
MAX_PERMUTATION_DRAWS = 200_000


def _data_seed(*groups: Sequence[Cluster]) -> int:
    """A seed from the data itself, so the same sessions give the same draws on every run and host."""
    digest = hashlib.sha256(repr([sorted(g) for g in groups]).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _exact_permutation(first: list[Cluster], second: list[Cluster], observed: float) -> float | None:
    """The exact permutation p-value, counting splits per distinct (errors, calls); None when too many states."""
    kinds = Counter(first + second)
    m = len(first)
    total_errors = sum(e * k for (e, _), k in kinds.items())
    total_calls = sum(n * k for (_, n), k in kinds.items())
    states: dict[tuple[int, int, int], int] = {(0, 0, 0): 1}
    for (e, n), count in kinds.items():
        grown: dict[tuple[int, int, int], int] = {}
        for (chosen, errors, calls), ways in states.items():
            for k in range(min(count, m - chosen) + 1):
                key = (chosen + k, errors + k * e, calls + k * n)
                grown[key] = grown.get(key, 0) + ways * math.comb(count, k)
            if len(grown) > EXACT_MAX_STATES:
                return None
        states = grown
    extreme = sum(ways for (chosen, errors, calls), ways in states.items() if chosen == m and abs(
        _ratio(errors, calls) - _ratio(total_errors - errors, total_calls - calls)) >= observed - 1e-12)
    return extreme / math.comb(len(first) + len(second), m)


def permutation_test(first: Sequence[Cluster], second: Sequence[Cluster], *, alpha: float = 0.05,
                     seed: int | None = None) -> PermutationResult | None:
    """Two-sided test of the difference of pooled error rates, permuting sessions between the groups.

    The verdict against `alpha` is a function of the data: exact where the distinct session counts are few,
    otherwise random splits (seeded from the data) drawn until the Monte Carlo error cannot flip it.
    """
    first = sorted(c for c in first if c[1] > 0)
    second = sorted(c for c in second if c[1] > 0)
    if not first or not second:
        return None
    if len(first) + len(second) > BOOTSTRAP_MAX_SESSIONS:
        a, b = _ratio_variance(first), _ratio_variance(second)
        if a is None or b is None:
            return None
        if a[1] + b[1] == 0:
            return PermutationResult(float(a[0] == b[0]) or P_FLOOR, "normal", 0.0, 0, True)
        p = max(P_FLOOR, math.erfc(abs(a[0] - b[0]) / math.sqrt(2 * (a[1] + b[1]))))
        return PermutationResult(p, "normal", 0.0, 0, True)
    pooled = first + second
    total_errors = sum(c[0] for c in pooled)
    total_calls = sum(c[1] for c in pooled)
    m = len(first)

    def difference(group: Sequence[Cluster]) -> float:
        e = sum(c[0] for c in group)
        n = sum(c[1] for c in group)
        return _ratio(e, n) - _ratio(total_errors - e, total_calls - n)

    observed = abs(difference(first))
    exact = _exact_permutation(first, second, observed)
    if exact is not None:
        return PermutationResult(max(P_FLOOR, min(1.0, exact)), "exact", 0.0, 0, True)
    rng = random.Random(_data_seed(first, second) if seed is None else seed)
    cap = max(DRAW_BATCH, min(MAX_PERMUTATION_DRAWS, MAX_PERMUTATION_WORK // len(pooled)))
    draws = extreme = 0
    while True:
        for _ in range(DRAW_BATCH):
            if abs(difference(rng.sample(pooled, m))) >= observed - 1e-12:
                extreme += 1
        draws += DRAW_BATCH
        p = (extreme + 1) / (draws + 1)
        error = math.sqrt(p * (1 - p) / draws)
        settled = abs(p - alpha) > SETTLE_Z * error
        if settled or draws >= cap:
            return PermutationResult(p, "monte carlo", error, draws, settled)


def permutation_difference(first: Sequence[Cluster], second: Sequence[Cluster]) -> float | None:
    """The two-sided permutation p-value (see `permutation_test`)."""
    found = permutation_test(first, second)
    return None if found is None else found.p


def median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return None
    return float(ordered[n // 2]) if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def bootstrap_median(values: Sequence[float], *, draws: int = 2000, seed: int = SEED) -> Interval | None:
    """95 % percentile interval of the median, resampling the values with replacement."""
    values = sorted(values)
    if not values:
        return None
    rng = random.Random(seed)
    draws = _draws(draws, len(values))
    medians = sorted(median(rng.choices(values, k=len(values))) or 0.0 for _ in range(draws))
    return medians[int(0.025 * (draws - 1))], medians[math.ceil(0.975 * (draws - 1))]
