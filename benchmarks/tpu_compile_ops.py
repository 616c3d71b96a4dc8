"""What XLA:TPU's compile costs by operation: the parts of QuantEcon opt_savings_1's Bellman operator (145 s to
compile on the TPU v5e, 0.09 s on a CPU), each jitted alone in a fresh process and stopped after 40 s.

    python3 benchmarks/tpu_compile_ops.py        # on the device; prints one line per variant

pow_int / pow_float: c ** (1 - g), g a traced int / float; recip: 1 / c; EV: sum(v * Q, axis=3), the continuation
value; B_recip / B_pow: the operator's max over w' with 1 / c / with the lecture's power; *_f32: with float32;
pow_int_small / pow_int_mid: on smaller grids. The v5e's output is tests/files/device/tpu_v5e/tpu_compile_ops.txt.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

VARIANTS = ["pow_int", "pow_float", "recip", "B_recip", "EV", "pow_int_mid", "pow_int_small", "pow_int_f32"]
VARIANTS += ["B_f32", "B_pow"]
SIZES = {"pow_int_small": (15, 10, 15), "pow_int_mid": (50, 100, 50)}
LIMIT_S = 40


def each_in_its_process() -> None:
    for variant in VARIANTS:
        started = time.perf_counter()
        try:
            run = subprocess.run([sys.executable, __file__, variant], capture_output=True, text=True, timeout=LIMIT_S)
            out = run.stdout.strip() or f"{variant}: no output ({run.stderr.strip().splitlines()[-1:]})"
        except subprocess.TimeoutExpired:
            out = f"{variant}: compile > {LIMIT_S} s (killed)"
        print(out, f"[{time.perf_counter() - started:.1f} s]", flush=True)


def one(variant: str) -> None:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", not variant.endswith("f32"))
    n = SIZES.get(variant, (150, 100, 150))
    c = jnp.linspace(0.1, 5.0, n[0] * n[1] * n[2]).reshape(n)
    v4, q = jnp.ones((1, 1, n[2], n[1])), jnp.ones((1, n[1], 1, n[1]))

    def bellman(c: Any, g: Any, v4: Any, q: Any) -> Any:
        reward = 1 / c if variant == "B_recip" else c ** (1 - g) / (1 - g)
        return jnp.max(jnp.where(c > 0, reward + 0.98 * jnp.sum(v4 * q, axis=3), -jnp.inf), axis=2)

    if variant.startswith("pow_int"):
        f, args = jax.jit(lambda c, g: c ** (1 - g)), (c, 2)
    elif variant == "pow_float":
        f, args = jax.jit(lambda c, g: c ** (1.0 - g)), (c, 2)
    elif variant == "recip":
        f, args = jax.jit(lambda c: 1 / c), (c,)
    elif variant == "EV":
        f, args = jax.jit(lambda v4, q: jnp.sum(v4 * q, axis=3)), (v4, q)
    else:  # B_recip, B_f32, B_pow
        f, args = jax.jit(bellman), (c, 2, v4, q)
    started = time.perf_counter()
    compiled = f.lower(*args).compile()
    compiled_at = time.perf_counter()
    compiled(*args).block_until_ready()
    ran_at = time.perf_counter()
    print(f"{variant} {n}: compile {compiled_at - started:.2f} s, run {ran_at - compiled_at:.4f} s", flush=True)


if __name__ == "__main__":
    one(sys.argv[1]) if len(sys.argv) > 1 else each_in_its_process()
