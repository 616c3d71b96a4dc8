"""``lax.scan`` and ``lax.fori_loop`` with a trivial body: the cost of one loop iteration.

A GPU runs each iteration of XLA's while loop with host involvement, so a tiny body costs µs per
iteration there and ns on a CPU; the lecture's 10 M-step scan took 82 s on a T4 and 0.06 s on a CPU.
Time per call is fitted as ``intercept + slope · trips`` over several trip counts; the slope is the
figure. Run on the default device and pinned to the CPU (inputs committed there).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, cast

import jax
import numpy as np
from jax import Array, lax

from nbscope.collect.bench import _jax, _stats
from nbscope.collect.bench._config import LOOP_CALL_LIMIT_S
from nbscope.collect.bench._context import BenchContext, count_label


def _body(carry: Array) -> Array:
    return carry * 0.5 + 1.0  # depends on the carry: the loop cannot be skipped or unrolled away


def scan_kernel(jax: ModuleType, trips: int) -> Callable[[Array], Array]:
    def step(carry: Array, _: None) -> tuple[Array, None]:
        return _body(carry), None

    # The length is static: one compile per trip count, as a lecture's scan compiles for its length.
    return cast("Callable[[Array], Array]", jax.jit(lambda c: lax.scan(step, c, None, length=trips)[0]))


def fori_kernel(jax: ModuleType) -> Callable[[Array, int], Array]:
    # The trip count is a traced argument: one compile, lowered to a while loop.
    return cast("Callable[[Array, int], Array]", jax.jit(lambda c, n: lax.fori_loop(0, n, lambda i, c: _body(c), c)))


def _call(
    jax: ModuleType, kind: str, fori: Callable[[Array, int], Array], carry: Array, trips: int
) -> Callable[[], Array]:
    if kind == "scan":
        f = scan_kernel(jax, trips)
        return lambda: f(carry).block_until_ready()
    return lambda: fori(carry, trips).block_until_ready()


def run(ctx: BenchContext) -> None:
    _jax.setup(ctx)
    trips = [int(t) for t in ctx.param("trips")]
    default = jax.devices()[0]
    placements: list[tuple[str, Any]] = [("default", default)]
    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError as exc:  # JAX_PLATFORMS without cpu
        ctx.notes.append(f"pinned-CPU variant not run: no CPU device ({exc})")
    else:
        if cpu == default and ctx.param("pin_cpu") != "always":
            # Pinning to the device that already runs everything would only repeat the figures.
            ctx.notes.append("pinned-CPU variant not run: the default device is the CPU")
        else:
            placements.append(("cpu", cpu))

    fori = fori_kernel(jax)
    series: list[tuple[str, str, str, list[dict[str, Any]]]] = []
    for placement, device in placements:
        carry = _jax.on_device(jax, np.asarray(0.0, dtype=ctx.dtype), device)
        name = _jax.device_name(device)
        for kind in ("scan", "fori_loop"):
            figures: list[dict[str, Any]] = []
            for n in trips:
                figure = ctx.bench(
                    f"{kind}_{placement}_{n}",
                    f"{kind} {count_label(n)} trips ({placement})",
                    _call(jax, kind, fori, carry, n),
                    params={"trips": n, "placement": placement},
                    device=name,
                    compile_probe=_jax.compile_probe,
                )
                figures.append(figure)
                if figure["first"]["wall_s"] > LOOP_CALL_LIMIT_S:
                    ctx.notes.append(
                        f"{kind} on {placement}: stopped after {count_label(n)} trips (a call took > {LOOP_CALL_LIMIT_S} s)"
                    )
                    break
            series.append((kind, placement, name, figures))
    ctx.flush()  # the fits need the steady medians
    for kind, placement, name, figures in reversed(series):
        # Each fit row goes right after its trip counts.
        position = max(ctx.figures.index(f) for f in figures) + 1
        ctx.figures.insert(position, _fit_figure(ctx, kind, placement, name, figures))


def _fit_figure(
    ctx: BenchContext, kind: str, placement: str, device: str, figures: list[dict[str, Any]]
) -> dict[str, Any]:
    points: list[tuple[int, _stats.Summary]] = [(f["params"]["trips"], f["steady"]) for f in figures]
    figure = ctx.new_figure(
        f"{kind}_{placement}_per_iter",
        f"{kind} per iteration ({placement})",
        params={"trips": [n for n, _ in points], "placement": placement},
        device=device,
        note="slope of a least-squares line through the trip counts' medians",
    )
    if len(points) < 2:
        figure["warnings"].append("fewer than two trip counts: no fit")
        return figure
    fit = _stats.linear_fit(
        [float(n) for n, _ in points],
        [st["median_s"] for _, st in points],
        [st["mad_s"] for _, st in points],  # each median's own uncertainty carries into the slope
    )
    slope, stderr = fit["slope"], fit["slope_stderr"]
    spread = abs(stderr / slope) if stderr is not None and slope > 0 else None
    figure["fit"] = {
        "per_iter_s": slope,
        "per_iter_us": slope * 1e6,
        "intercept_s": fit["intercept"],
        "slope_stderr_s": stderr,
        "spread": spread,
        "r2": fit["r2"],
        "points": [{"trips": n, "median_s": st["median_s"], "mad_s": st["mad_s"]} for n, st in points],
    }
    if spread is None or spread > _stats.SPREAD_WARN:
        figure["warnings"].append(
            "per-iteration slope uncertain" if spread is None else f"fit spread {spread:.0%} > 10%"
        )
    if slope > 0:
        figure["throughput"] = {"value": 1e-6 / slope, "unit": "M iter/s"}
    return figure
