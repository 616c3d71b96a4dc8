"""Small statistics the analyses share: median absolute deviation and an exact one-sided Mann–Whitney U test."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from functools import lru_cache


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation (unscaled); 0 for fewer than 2 values."""
    if len(values) < 2:
        return 0.0
    median = statistics.median(values)
    return statistics.median(abs(v - median) for v in values)


@lru_cache(maxsize=256)
def _u_distribution(n: int, m: int) -> tuple[int, ...]:
    """Counts of arrangements giving each U (pairs x > y) for samples of sizes n and m without ties."""
    if n == 0 or m == 0:
        return (1,)
    # The largest of the n + m values is either an x (beats all m y's) or a y (beats nothing).
    with_x = _u_distribution(n - 1, m)
    with_y = _u_distribution(n, m - 1)
    counts = [0] * (n * m + 1)
    for u, count in enumerate(with_x):
        counts[u + m] += count
    for u, count in enumerate(with_y):
        counts[u] += count
    return tuple(counts)


def mann_whitney_greater(x: Sequence[float], y: Sequence[float]) -> float:
    """One-sided p-value of the Mann–Whitney U test for "x tends to be larger than y".

    Exact (by the distribution of U) when there are no ties and both samples have at most 30 values,
    else the normal approximation with tie and continuity corrections (as scipy's ``method="auto"``).
    """
    n, m = len(x), len(y)
    if n == 0 or m == 0:
        raise ValueError("both samples need at least one value")
    u = sum((xi > yj) + 0.5 * (xi == yj) for xi in x for yj in y)
    combined = sorted([*x, *y])
    tie_groups = [len(list(g)) for _, g in itertools.groupby(combined)]
    has_ties = any(t > 1 for t in tie_groups)
    if not has_ties and n <= 30 and m <= 30:
        counts = _u_distribution(n, m)
        total = math.comb(n + m, n)
        return min(1.0, sum(counts[math.ceil(u - 1e-9) :]) / total)
    mean = n * m / 2
    total_n = n + m
    tie_term = sum(t**3 - t for t in tie_groups) / (total_n * (total_n - 1))
    variance = n * m / 12 * ((total_n + 1) - tie_term)
    if variance <= 0:
        return 1.0
    z = (u - mean - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))
