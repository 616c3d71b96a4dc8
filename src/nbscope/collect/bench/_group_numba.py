"""Numba: a serial and a ``prange`` kernel over a float array, compile and steady state apart.

Both kernels read every element and return a value that depends on all of them, so LLVM cannot fold
them into a formula (the seed's integer-sum loop was folded and measured nothing).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numba
from numba import prange

from nbscope.collect.bench._arrays import host_array
from nbscope.collect.bench._context import BenchContext, count_label
from nbscope.collect.probe._nbscope_events import register_numba_listener

if TYPE_CHECKING:
    import numpy as np

_compile_s: list[float] = []  # outermost compiles only: nested ones (overloads) overlap them


@contextmanager
def compile_probe() -> Iterator[dict[str, float]]:
    mark = len(_compile_s)
    result: dict[str, float] = {}
    try:
        yield result
    finally:
        seen = _compile_s[mark:]
        result["compile_s"] = sum(seen)
        result["compiles"] = len(seen)


def sqrt_sum(x: np.ndarray) -> float:
    # An in-order float reduction (no fastmath, so no reassociation): it stays a real loop.
    total = 0.0
    for i in range(x.size):
        total += math.sqrt(x[i])
    return total


def sum_squares(x: np.ndarray) -> float:
    total = 0.0
    for i in prange(x.size):
        total += x[i] * x[i]
    return total


def run(ctx: BenchContext) -> None:
    register_numba_listener(None, lambda _, seconds: _compile_s.append(seconds))
    ctx.info["numba_version"] = numba.__version__
    ctx.info["numba_threads"] = numba.get_num_threads()

    n = ctx.count("n")
    x = host_array(n, ctx.dtype, seed=3)
    for name, label, kernel in (
        ("serial", "Numba serial sqrt sum", numba.njit(sqrt_sum)),
        ("prange", "Numba prange sum of squares", numba.njit(parallel=True)(sum_squares)),
    ):
        ctx.bench(
            name,
            f"{label} {count_label(n)}",
            lambda kernel=kernel: kernel(x),
            params={"n": n},
            device="cpu",
            compile_probe=compile_probe,
            work=(n / 1e9, "G elem/s"),
        )
    try:
        ctx.info["threading_layer"] = numba.threading_layer()  # type: ignore[attr-defined]
    except ValueError:  # raised when no parallel kernel has run
        pass
