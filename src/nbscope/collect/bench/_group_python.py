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
    for name, label, loop, dtype, size in (
        ("int_sum", "Python int sum", int_sum, "int", "int_sum_n"),
        ("sqrt_sum", "Python float sqrt sum", sqrt_sum, "float64", "sqrt_n"),
    ):
        n = ctx.count(size)
        ctx.bench(
            name,
            f"{label} {count_label(n)}",
            lambda loop=loop, n=n: loop(n),
            dtype=dtype,
            params={"n": n},
            device="cpu",
            work=(n / 1e6, "M iter/s"),
        )
