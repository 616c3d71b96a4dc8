"""Pure Python loops: the interpreter's speed, the baseline every compiled figure is read against."""

from __future__ import annotations

import math

from nbscope.collect.bench._context import BenchContext, count_label


def int_sum(n: int) -> int:
    # An explicit loop, as in the seed: sum(range(n)) would time a C loop instead.
    total = 0
    for i in range(n):
        total += i
    return total


def sqrt_sum(n: int) -> float:
    total = 0.0
    for i in range(n):
        total += math.sqrt(i)
    return total


def run(ctx: BenchContext) -> None:
    n = ctx.param("int_sum_n")
    ctx.bench(
        "int_sum",
        f"Python int sum {count_label(n)}",
        lambda: int_sum(n),
        dtype="int",
        params={"n": n},
        device="cpu",
        work=(n / 1e6, "M iter/s"),
    )
    m = ctx.param("sqrt_n")
    ctx.bench(
        "sqrt_sum",
        f"Python float sqrt sum {count_label(m)}",
        lambda: sqrt_sum(m),
        dtype="float64",
        params={"n": m},
        device="cpu",
        work=(m / 1e6, "M iter/s"),
    )
