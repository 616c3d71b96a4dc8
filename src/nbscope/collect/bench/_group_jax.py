"""JAX: matmul (small and large) and the seed's elementwise expression.

Each kernel is a fresh ``jax.jit`` in a fresh process: its first call is compile (from jax.monitoring
events) plus run; its steady state comes from calibrated samples. Every call ends in
``block_until_ready``, because JAX dispatch is asynchronous even on a CPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from nbscope.collect.bench import _jax
from nbscope.collect.bench._context import BenchContext, count_label


def elementwise(x: jax.Array) -> jax.Array:
    return jnp.cos(x**2) + jnp.sin(x)


def matmul(a: jax.Array, b: jax.Array) -> jax.Array:
    return a @ b


def run(ctx: BenchContext) -> None:
    _jax.setup(ctx)
    device = _jax.device_name(jax.devices()[0])

    for name, key in (("matmul_small", "matmul_small_n"), ("matmul_large", "matmul_large_n")):
        n = ctx.count(key)
        a = _jax.on_device(jax, _jax.host_array((n, n), ctx.dtype, seed=1))
        f = jax.jit(matmul)
        ctx.bench(
            name,
            f"JAX matmul {n}",
            lambda f=f, a=a: f(a, a).block_until_ready(),
            params={"n": n},
            device=device,
            compile_probe=_jax.compile_probe,
            work=(2 * n**3 / 1e9, "GFLOP/s"),
        )

    m = ctx.count("elementwise_n")
    x = _jax.on_device(jax, _jax.host_array(m, ctx.dtype, seed=2))
    g = jax.jit(elementwise)
    ctx.bench(
        "elementwise",
        f"JAX cos(x**2)+sin(x) {count_label(m)}",
        lambda: g(x).block_until_ready(),
        params={"n": m},
        device=device,
        compile_probe=_jax.compile_probe,
        work=(m / 1e9, "G elem/s"),
    )
