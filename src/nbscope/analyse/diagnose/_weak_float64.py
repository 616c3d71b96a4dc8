"""Float64 on a GPU with weak float64 throughput: x64 on, and the device's float64 rate is 1/32 of its
float32 rate or less (T4, consumer and A10/L4-class parts; see ``nbscope.collect._gpu_classes``).

On a CPU run recorded with program data (``nbscope profile --forecast``), the rule fires as a forecast
risk for each weak-float64 GPU the run is forecast for (``diagnose(gpus=...)``, else those named at
record time, else the T4): the float64 arithmetic of the compiled programs, forecast on that GPU at its
float64 rate, against the same programs at its float32 rate; it fires when the difference is at least
``min_forecast_cost_s``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, TypedDict

from nbscope.analyse.diagnose import _forecast
from nbscope.analyse.diagnose._base import Context, Finding, Outcome, Rule, Skip, seconds, severity

if TYPE_CHECKING:  # the forecast is imported only when a run can be forecast
    from nbscope.analyse.forecast.risks import Float64Cost

NAME = "weak-float64"
THRESHOLDS = {
    "min_forecast_cost_s": 0.1  # forecast only: float64's extra time over float32 on the GPU, whole notebook
}


class _Cost(TypedDict):
    """What float64 costs on one GPU, as the finding's evidence says it."""

    device: str
    fp64_share: str
    float64_low_s: float
    float64_high_s: float | None
    float32_low_s: float
    float32_high_s: float | None
    extra_low_s: float
    extra_high_s: float | None


def _forecast_outcomes(ctx: Context) -> Iterator[Outcome]:
    """Forecast findings on a CPU run: what float64 costs on each weak-float64 GPU it is forecast for."""
    found = ctx.forecast
    if found.result is None:
        return
    from nbscope.analyse.forecast.risks import float64_costs, fp64_share, weak_float64

    limit = ctx.limits(NAME, THRESHOLDS)
    weak = [d for d in found.devices if weak_float64(d)]
    costs: dict[str, _Cost] = {}  # per GPU: the finding's evidence of it
    cost_rows: dict[str, list[Float64Cost]] = {}
    for device in weak:
        rows = float64_costs(ctx.record, device, found.table)
        if not rows:
            continue
        f64_low = sum(r.float64_low_s for r in rows)
        f32_low = sum(r.float32_low_s for r in rows)
        highs = [(r.float64_high_s, r.float32_high_s) for r in rows]
        unbounded = any(a is None or b is None for a, b in highs)
        extra_low = f64_low - f32_low
        f64_high = None if unbounded else sum(a for a, _ in highs if a is not None)
        f32_high = None if unbounded else sum(b for _, b in highs if b is not None)
        if extra_low >= limit["min_forecast_cost_s"]:
            costs[device.key] = {
                "device": device.name,
                "fp64_share": f"1/{1 / fp64_share(device):.0f}",
                "float64_low_s": f64_low,
                "float64_high_s": f64_high,
                "float32_low_s": f32_low,
                "float32_high_s": f32_high,
                "extra_low_s": extra_low,
                "extra_high_s": None if f64_high is None or f32_high is None else f64_high - f32_high,
            }
            cost_rows[device.key] = rows
    if not costs:
        return
    key, worst = max(costs.items(), key=lambda item: item[1]["extra_low_s"])
    cells = sorted({r.index for rows in cost_rows.values() for r in rows})
    functions = sorted({f for rows in cost_rows.values() for r in rows for f in r.functions})
    source_cells = ctx.code.x64_cells if ctx.has_sources else []
    switch = f" (turned on in cell {source_cells[0] + 1})" if source_cells else ""
    span = _forecast.seconds_range
    per_gpu = "; ".join(
        f"{_forecast.on_a(k)} (float64 at {c['fp64_share']} of float32) it takes "
        f"{span(c['float64_low_s'], c['float64_high_s'])} where float32 would take "
        f"{span(c['float32_low_s'], c['float32_high_s'])}: {span(c['extra_low_s'], c['extra_high_s'])} more"
        for k, c in costs.items()
    )
    names = ", ".join(f"`{f}`" for f in functions[:4]) + (" …" if len(functions) > 4 else "")
    where = f"cell {cells[0] + 1}" if len(cells) == 1 else f"{len(cells)} cells"
    yield Finding(
        rule=NAME,
        title=f"float64 on a GPU with weak float64 (forecast: {', '.join(k.upper() for k in costs)})",
        cell_index=cells[0] if len(cells) == 1 else None,
        severity=severity(worst["extra_low_s"], found.result.notebook[key].low_s),
        confidence=0.7,
        evidence={
            "platform": ctx.backend.platform,
            "float64_cells": cells,
            "float64_functions": functions,
            "x64_set_in_cells": source_cells,
            "forecast": costs,
            "forecast_run": ctx.record.run_id,
            "seconds_at_stake": round(worst["extra_low_s"], 4),
        },
        summary=f"forecast: the float64 arithmetic of {names} in {where}{switch}: {per_gpu}",
        fix=(
            f"Nothing to change on this CPU. Where the notebook runs {_forecast.on_a(key)}, keep JAX in float32: drop "
            f"`jax.config.update('jax_enable_x64', True)`{switch} / JAX_ENABLE_X64, or cast the large arrays with "
            "`.astype(jnp.float32)`, keeping float64 only where accuracy needs it; or run it on the CPU or on a GPU "
            "with full-rate float64 (A100, H100)."
        ),
        forecast=list(costs),
    )


def evaluate(ctx: Context) -> Iterator[Outcome]:
    if ctx.backend.platform == "cpu":
        yield from _forecast_outcomes(ctx)  # float64 is full speed on CPUs: only a GPU forecast can say
        return
    if ctx.backend.platform != "gpu":
        return
    machine = ctx.record.machine()
    device = machine.gpu  # JAX's default device is the first visible one
    if device is None:
        yield Skip(
            NAME,
            f"JAX ran on a GPU but the fingerprint lists no GPU devices ({machine.gpus_absent or 'an empty list'})",
        )
        return
    fp64 = device.fp64
    if fp64.value is None:
        yield Skip(NAME, f"float64 class of {device.name} unknown: {fp64.reason or 'not in the table'}")
        return
    if not fp64.weak:
        return
    x64 = ctx.x64
    source_cells = ctx.code.x64_cells if ctx.has_sources else []
    if x64.x64 is not True and not source_cells:
        if x64.x64 is None:
            yield Skip(
                NAME,
                f"{device.name} has weak float64 ({fp64.ratio}) but the run records no dtype evidence ({x64.source})",
            )
        return
    float64_cells = list(x64.cells)
    float64_functions = {
        name for name, stats in ctx.functions.items() if any("float64" in s or "complex128" in s for s in stats.shapes)
    }
    affected = set(float64_cells)
    if ctx.has_sources:
        # Cells that call a function compiled for float64 run float64 work without compiling again.
        for index, calls in ctx.code.calls_by_cell.items():
            if calls & float64_functions:
                affected.add(index)
    cells = [c for c in ctx.run.cells if c.index in affected]
    at_stake = sum(c.run_s or 0.0 for c in cells)
    ratios = {}
    for cell in cells:
        paired = ctx.other_cells.get(cell.index)
        other_wall = paired.notebook_wall_s if paired is not None else None  # nbscope's collection left out
        if other_wall is not None and other_wall > 0:
            ratios[str(cell.index)] = round((cell.notebook_wall_s or 0.0) / other_wall, 2)
    confidence = 0.9 if float64_cells else 0.7
    switch = f" (turned on in cell {source_cells[0] + 1})" if source_cells else ""
    yield Finding(
        rule=NAME,
        title="float64 on a GPU with weak float64",
        cell_index=None,
        severity=severity(at_stake, ctx.total_wall, floor="medium"),
        confidence=confidence,
        evidence={
            "device": device.name,
            "compute_capability": device.compute_capability,
            "fp64_ratio": fp64.ratio,
            "x64": x64.x64 if x64.x64 is not None else bool(source_cells),
            "x64_source": x64.source if x64.x64 else "jax_enable_x64 in the notebook source",
            "x64_set_in_cells": source_cells,
            "float64_cells": float64_cells,
            "float64_functions": sorted(float64_functions),
            "affected_cells": sorted(affected),
            "affected_run_s": round(at_stake, 4),
            "gpu_over_other": ratios or None,
            "seconds_at_stake": round(at_stake, 4),
        },
        summary=(
            f"float64 work on a {device.name}, whose float64 rate is {fp64.ratio} of float32{switch}: "
            f"{len(affected)} cell(s), {seconds(at_stake)} of run time"
        ),
        fix=(
            f"On this GPU keep JAX in float32: drop `jax.config.update('jax_enable_x64', True)`{switch} / JAX_ENABLE_X64, "
            "or cast the large arrays with `.astype(jnp.float32)`, keeping float64 only where accuracy needs it; or run "
            "float64 notebooks on the CPU or on a GPU with full-rate float64 (A100, H100)."
        ),
    )


RULE = Rule(NAME, evaluate, thresholds=THRESHOLDS)
