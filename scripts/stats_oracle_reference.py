"""Writes tests/stats/data/stats_reference.json from scipy (the outside oracle; not a runtime dependency).

Run it with a Python that has scipy, outside the project's venv:
    python scripts/stats_oracle_reference.py > tests/stats/data/stats_reference.json
"""

from __future__ import annotations

import json
import random

from scipy.stats import fisher_exact, hypergeom

rng = random.Random(28)
fisher = []
for _ in range(300):
    n1, n2 = rng.randint(1, 3000), rng.randint(1, 3000)
    k1, k2 = rng.randint(0, n1), rng.randint(0, n2)
    fisher.append([k1, n1 - k1, k2, n2 - k2])
# Large stores: 2.2e7 calls in all, rates close enough that p is neither 0 nor 1.
fisher += [[550_000, 10_450_000, 552_600, 10_447_400], [242_000, 10_758_000, 243_500, 10_756_500],
           [24_200, 1_075_800, 25_000, 1_075_000]]


def exact_tails(t: list[int]) -> float:
    """The two-sided p at 30 digits (mpmath): scipy's own sum drifts by ~1e-10 relative past 1e7 calls."""
    import mpmath as mp

    mp.mp.dps = 30
    a, b, c, d = t
    r1, r2, c1 = a + b, c + d, a + c
    dist = hypergeom(r1 + r2, r1, c1)
    lo, hi = int(dist.ppf(1e-30)), int(dist.isf(1e-30))

    def lp(x: int) -> mp.mpf:
        return (mp.loggamma(r1 + 1) - mp.loggamma(x + 1) - mp.loggamma(r1 - x + 1) + mp.loggamma(r2 + 1)
                - mp.loggamma(c1 - x + 1) - mp.loggamma(r2 - c1 + x + 1) - mp.loggamma(r1 + r2 + 1)
                + mp.loggamma(c1 + 1) + mp.loggamma(r1 + r2 - c1 + 1))

    bound = lp(a) + mp.log1p(mp.mpf("1e-7"))
    return float(sum(mp.exp(v) for x in range(lo, hi + 1) if (v := lp(x)) <= bound))


rows = [{"table": t, "p": float(fisher_exact([t[:2], t[2:]])[1]) if sum(t) < 1e6 else exact_tails(t),
         "oracle": "scipy" if sum(t) < 1e6 else "mpmath"} for t in fisher]

# The seed's counts spread one call per session (9 of 161 vs 19 of 158): the permutation distribution of the
# pooled rates' difference is hypergeometric, so its exact two-sided p-value is a sum over that distribution.
m1, m2, errors = 161, 158, 28
observed = abs(9 / m1 - 19 / m2)
dist = hypergeom(m1 + m2, errors, m1)
seed_p = sum(float(dist.pmf(k)) for k in range(errors + 1) if abs(k / m1 - (errors - k) / m2) >= observed - 1e-12)
print(json.dumps({"fisher": rows, "seed_permutation": {"first": [9, m1], "second": [19, m2], "p": seed_p}},
                 indent=0))
