"""The seed's "lecture simulation": a fresh jit of a matmul at growing sizes, as a lecture meets them.

Per size: the first call (compile + run, what the lecture pays) and, except in the quick preset, the
steady state; plus one row with the first calls summed, the seed's single figure.
"""

from __future__ import annotations

import jax

from nbscope.collect.bench import _jax
from nbscope.collect.bench._context import BenchContext


def run(ctx: BenchContext) -> None:
    _jax.setup(ctx)
    device = _jax.device_name(jax.devices()[0])
    sizes = ctx.counts("sizes")
    steady = bool(ctx.param("steady"))
    total = {"wall_s": 0.0, "compile_s": 0.0, "run_s": 0.0, "compiles": 0}
    for n in sizes:
        a = _jax.on_device(jax, _jax.host_array((n, n), ctx.dtype, seed=n))
        f = jax.jit(lambda a: a @ a)  # a new function object: traced and compiled afresh
        figure = ctx.bench(
            f"matmul_{n}",
            f"multi-size matmul {n}",
            lambda f=f, a=a: f(a).block_until_ready(),
            params={"n": n},
            device=device,
            compile_probe=_jax.compile_probe,
            work=(2 * n**3 / 1e9, "GFLOP/s"),
            steady=steady,
        )
        for key in total:
            total[key] += figure["first"].get(key) or 0
        del a
    summary = ctx.new_figure(
        "total",
        f"multi-size total ({', '.join(map(str, sizes))})",
        params={"sizes": sizes},
        device=device,
        note="sum of the first calls",
    )
    summary["first"] = total
    ctx.add(summary)
