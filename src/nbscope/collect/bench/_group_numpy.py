"""NumPy: a BLAS matmul and the seed's elementwise expression, in the requested dtype."""

from __future__ import annotations

import numpy as np

from nbscope.collect.bench._arrays import host_array
from nbscope.collect.bench._context import BenchContext, count_label


def run(ctx: BenchContext) -> None:
    ctx.info["numpy_version"] = np.__version__
    dtype = ctx.dtype

    n = ctx.count("matmul_n")
    a = host_array((n, n), dtype, seed=1)
    ctx.bench(
        "matmul", f"NumPy matmul {n}", lambda: a @ a, params={"n": n}, device="cpu", work=(2 * n**3 / 1e9, "GFLOP/s")
    )

    m = ctx.count("elementwise_n")
    x = host_array(m, dtype, seed=2)
    ctx.bench(
        "elementwise",
        f"NumPy cos(x**2)+sin(x) {count_label(m)}",
        lambda: np.cos(x**2) + np.sin(x),
        params={"n": m},
        device="cpu",
        work=(m / 1e9, "G elem/s"),
    )
