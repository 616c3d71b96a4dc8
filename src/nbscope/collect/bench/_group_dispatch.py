"""JAX dispatch: the round trip of a tiny jitted op, and its cost when calls are queued back to back."""

from __future__ import annotations

import jax

from nbscope.collect.bench import _jax
from nbscope.collect.bench._context import BenchContext

CHAIN = 100  # calls queued before one wait, to see the dispatch cost without the round trip


def run(ctx: BenchContext) -> None:
    _jax.setup(ctx)
    device = _jax.device_name(jax.devices()[0])
    x = _jax.on_device(jax, _jax.host_array(1, ctx.dtype, seed=4).reshape(()))
    f = jax.jit(lambda v: v + 1)

    ctx.bench(
        "round_trip",
        "JAX tiny op round trip (call + block)",
        lambda: f(x).block_until_ready(),
        params={"shape": []},
        device=device,
        compile_probe=_jax.compile_probe,
        work=(1e-3, "k calls/s"),
    )

    def chained() -> object:
        y = x
        for _ in range(CHAIN):
            y = f(y)
        return y.block_until_ready()

    figure = ctx.bench(
        "chained",
        f"JAX tiny op, {CHAIN} chained calls then block",
        chained,
        params={"chain": CHAIN},
        device=device,
        first=False,
        work=(CHAIN / 1e3, "k calls/s"),
        note=f"time per {CHAIN} calls",
    )
    ctx.flush()
    figure["per_call_s"] = figure["steady"]["median_s"] / CHAIN
