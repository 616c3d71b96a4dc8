"""What counting every execution costs (the probe's ``_Counter``, issue AC): a small jitted call and an eager
operation timed with the counter installed and without, interleaved, in one bare JAX process (no profiler).

    python benchmarks/count_cost.py [--calls N] [--rounds R]

Prints, per kind of call, the median time per call without and with the counter over the rounds and the
difference, and checks that the counter counted every call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src" / "nbscope" / "collect" / "probe"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    import _nbscope_program as programs
    import jax
    import jax.numpy as jnp

    counter = programs._Counter()
    counter.install()
    state = counter.state
    step = jax.jit(lambda x: x * 0.5 + 1.0)
    x = jnp.ones(10)
    kinds = {"jitted call": lambda: step(x), "eager jnp.cos": lambda: jnp.cos(x)}
    for call in kinds.values():
        call().block_until_ready()  # compiled, and its fast path learnt

    def timed(call: object, hooked: bool) -> float:
        state.set_global(counter.hook if hooked else None)
        state.set_local(counter.hook if hooked else None)
        started = time.perf_counter()
        for _ in range(args.calls):
            out = call()  # type: ignore[operator]
        out.block_until_ready()
        return (time.perf_counter() - started) / args.calls

    for name, call in kinds.items():
        off, on = [], []
        counter.counts.clear()
        for _ in range(args.rounds):
            off.append(timed(call, False))
            on.append(timed(call, True))
        counted = sum(counter.counts.values())
        bare, hooked = statistics.median(off), statistics.median(on)
        print(
            f"{name}: {bare * 1e6:.2f} µs without, {hooked * 1e6:.2f} µs with the counter "
            f"(+{(hooked - bare) * 1e6:.2f} µs a call); counted {counted:,} of {args.calls * args.rounds:,}"
        )


if __name__ == "__main__":
    main()
