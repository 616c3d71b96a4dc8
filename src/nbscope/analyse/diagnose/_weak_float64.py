"""Float64 on a GPU with weak float64 throughput: x64 on, and the device's float64 rate is 1/32 of its
float32 rate or less (T4, consumer and A10/L4-class parts; see ``nbscope.collect._gpu_classes``)."""

from __future__ import annotations

from collections.abc import Iterator

from nbscope.analyse.diagnose._base import Context, Finding, Outcome, Rule, Skip, seconds, severity

NAME = "weak-float64"


def evaluate(ctx: Context) -> Iterator[Outcome]:
    if ctx.platform["platform"] != "gpu":
        return  # float64 is full speed on CPUs
    devices = (ctx.record.fingerprint.get("gpu") or {}).get("devices")
    if not isinstance(devices, list) or not devices:
        yield Skip(NAME, f"JAX ran on a GPU but the fingerprint lists no GPU devices ({devices})")
        return
    device = devices[0]  # JAX's default device is the first visible one
    fp64 = device.get("fp64_class") or {}
    if fp64.get("value") is None:
        yield Skip(NAME, f"float64 class of {device.get('name')} unknown: {fp64.get('reason', 'not in the table')}")
        return
    if not fp64.get("weak"):
        return
    x64 = ctx.x64
    source_cells = ctx.code.x64_cells if ctx.has_sources else []
    if x64["x64"] is not True and not source_cells:
        if x64["x64"] is None:
            yield Skip(NAME, f"{device.get('name')} has weak float64 ({fp64.get('ratio')}) but the run records no dtype "
                             f"evidence ({x64['source']})")
        return
    float64_cells = list(x64.get("cells") or [])
    float64_functions = {
        name for name, stats in ctx.functions.items() if any("float64" in s or "complex128" in s for s in stats.shapes)
    }
    affected = set(float64_cells)
    if ctx.has_sources:
        # Cells that call a function compiled for float64 run float64 work without compiling again.
        for index, calls in ctx.code.calls_by_cell.items():
            if calls & float64_functions:
                affected.add(index)
    cells = [c for c in ctx.cells if c.get("index") in affected]
    at_stake = sum(float(c.get("run_s") or 0.0) for c in cells)
    ratios = {}
    for cell in cells:
        paired = ctx.other_cells.get(int(cell["index"]))
        if paired and isinstance(paired.get("wall_s"), (int, float)) and paired["wall_s"] > 0:
            ratios[str(cell["index"])] = round(float(cell.get("wall_s") or 0.0) / paired["wall_s"], 2)
    confidence = 0.9 if float64_cells else 0.7
    switch = f" (turned on in cell {source_cells[0] + 1})" if source_cells else ""
    yield Finding(
        rule=NAME,
        title="float64 on a GPU with weak float64",
        cell_index=None,
        severity=severity(at_stake, ctx.total_wall, floor="medium"),
        confidence=confidence,
        evidence={
            "device": device.get("name"),
            "compute_capability": device.get("compute_capability"),
            "fp64_ratio": fp64.get("ratio"),
            "x64": x64["x64"] if x64["x64"] is not None else bool(source_cells),
            "x64_source": x64["source"] if x64["x64"] else "jax_enable_x64 in the notebook source",
            "x64_set_in_cells": source_cells,
            "float64_cells": float64_cells,
            "float64_functions": sorted(float64_functions),
            "affected_cells": sorted(affected),
            "affected_run_s": round(at_stake, 4),
            "gpu_over_other": ratios or None,
            "seconds_at_stake": round(at_stake, 4),
        },
        summary=(
            f"float64 work on a {device.get('name')}, whose float64 rate is {fp64.get('ratio')} of float32{switch}: "
            f"{len(affected)} cell(s), {seconds(at_stake)} of run time"
        ),
        fix=(
            f"On this GPU keep JAX in float32: drop `jax.config.update('jax_enable_x64', True)`{switch} / JAX_ENABLE_X64, "
            "or cast the large arrays with `.astype(jnp.float32)`, keeping float64 only where accuracy needs it; or run "
            "float64 notebooks on the CPU or on a GPU with full-rate float64 (A100, H100)."
        ),
    )


RULE = Rule(NAME, "float64 on a GPU with weak float64", "GPU fp64 class (fingerprint), x64 evidence (shapes, settings, source)", evaluate)
