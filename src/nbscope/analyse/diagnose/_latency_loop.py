"""Latency-bound loop: ``lax.scan`` / ``fori_loop`` / ``while_loop`` with a small body on a device that
pays a fixed cost per iteration (XLA:GPU involves the host in every iteration of dynamic control flow:
microseconds per step, where a CPU pays nanoseconds).

Evidence, strongest first: the cell's ``timeline`` summary classifies it as launch- or latency-bound
(``nbscope profile --timeline``); or the same cell ran many times faster in a CPU run (``other``) and
its source calls a loop primitive. A slow loop cell on a GPU with neither is reported as not evaluated.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from nbscope.analyse.diagnose._base import (
    Context,
    Finding,
    Outcome,
    Rule,
    Skip,
    cell_label,
    seconds,
    severity,
)

NAME = "latency-bound-loop"
LATENCY_WORDS = ("launch", "latency")
THRESHOLDS = {
    "min_ratio": 3.0,  # GPU cell at least this many times slower than the same cell on CPU ...
    "min_delta_s": 0.5,  # ... and at least this much slower
    "min_run_s": 1.0,  # a loop cell below this is not worth asking for a timeline
}


def _timeline(cell: Mapping[str, Any]) -> dict[str, Any] | None:
    timeline = cell.get("timeline")
    if not isinstance(timeline, Mapping) or timeline.get("error") or not timeline.get("classification"):
        return None
    return dict(timeline)


def _timeline_evidence(timeline: Mapping[str, Any]) -> dict[str, Any]:
    # Scalars and short lists only: a timeline may carry long op tables.
    return {
        k: v for k, v in timeline.items()
        if isinstance(v, (int, float, str, bool)) or v is None or (isinstance(v, list) and len(v) <= 5)
    }


def _loop_functions(ctx: Context, cell: Mapping[str, Any]) -> dict[str, list[str]]:
    """Notebook functions with loop primitives that this cell calls or compiles."""
    if not ctx.has_sources:
        return {}
    called = set(ctx.code.calls_by_cell.get(int(cell["index"]), set()))
    called |= {str(f.get("name")) for f in (cell.get("jax") or {}).get("functions") or []}
    found = {}
    for name in called:
        primitives = ctx.code.primitives_in(name)
        if primitives:
            found[name] = primitives
    return found


def _named(functions: Mapping[str, list[str]]) -> str:
    return ", ".join(f"`{name}` ({', '.join(primitives)})" for name, primitives in functions.items())


def _fix(functions: Mapping[str, list[str]], on_cpu: bool) -> str:
    names = ", ".join(f"`{n}`" for n in functions) or "this cell's loop"
    if on_cpu:
        return (
            f"Nothing to change on the CPU; when this notebook runs on a GPU, keep {names} on the CPU with "
            "`with jax.default_device(jax.devices('cpu')[0]):` around the call."
        )
    if not functions:
        return (
            "Fuse the per-step operations into one jitted function (fewer, larger launches), or run this cell on the "
            "CPU: `with jax.default_device(jax.devices('cpu')[0]):` around it."
        )
    return (
        f"Run {names} on the CPU: wrap the call in `with jax.default_device(jax.devices('cpu')[0]):`, or pass it "
        "inputs placed with `jax.device_put(x, jax.devices('cpu')[0])` (a jitted function runs where its inputs live); "
        "or set `JAX_PLATFORMS=cpu` for the whole notebook. (`jax.jit(..., device=cpu)` also works but is deprecated.)"
    )


def evaluate(ctx: Context) -> Iterator[Outcome]:
    limit = ctx.limits(NAME, THRESHOLDS)
    platform = ctx.platform["platform"]
    other_platform = (ctx.other_platform or {}).get("platform")
    needs_sources = False
    for cell in ctx.cells:
        if not ctx.ran(cell):
            continue
        wall, run = float(cell.get("wall_s") or 0.0), float(cell.get("run_s") or 0.0)
        functions = _loop_functions(ctx, cell)
        timeline = _timeline(cell)
        base = {"platform": platform, "platform_source": ctx.platform["source"], "wall_s": round(wall, 4),
                "run_s": round(run, 4), "loop_functions": functions}
        if timeline is not None and any(w in str(timeline["classification"]).lower() for w in LATENCY_WORDS):
            on_cpu = platform == "cpu"
            at_stake = run
            yield Finding(
                rule=NAME,
                title="Latency-bound loop",
                cell_index=cell["index"],
                severity="low" if on_cpu else severity(at_stake, ctx.total_wall),
                confidence=0.9 if functions else 0.75,
                evidence={**base, "timeline": _timeline_evidence(timeline), "seconds_at_stake": round(0.0 if on_cpu else at_stake, 4)},
                summary=(
                    f"{cell_label(cell)} is {timeline['classification']} on the {platform or 'device'}"
                    + (f": {_named(functions)}" if functions else "")
                    + f", {seconds(run)} of run time"
                    + (f", device busy {seconds(timeline['device_busy_s'])}" if isinstance(timeline.get('device_busy_s'), (int, float)) else "")
                ),
                fix=_fix(functions, on_cpu),
            )
            continue
        if platform != "gpu":
            continue
        if not ctx.has_sources:
            needs_sources = True
            continue
        if not functions:
            continue
        paired = ctx.other_cells.get(int(cell["index"])) if other_platform == "cpu" else None
        other_wall = (paired or {}).get("wall_s")
        if isinstance(other_wall, (int, float)) and other_wall >= 0:
            ratio = wall / other_wall if other_wall > 0 else float("inf")
            if ratio >= limit["min_ratio"] and wall - other_wall >= limit["min_delta_s"]:
                at_stake = wall - other_wall
                yield Finding(
                    rule=NAME,
                    title="Latency-bound loop",
                    cell_index=cell["index"],
                    severity=severity(at_stake, ctx.total_wall, floor="medium"),
                    confidence=0.8,
                    evidence={**base, "cpu_wall_s": round(other_wall, 4), "gpu_over_cpu": round(ratio, 2),
                              "cpu_run": ctx.other.run_id if ctx.other else None, "seconds_at_stake": round(at_stake, 4)},
                    summary=(
                        f"{cell_label(cell)} runs {_named(functions)} "
                        f"{ratio:.0f}× slower on the GPU than on the CPU ({seconds(wall)} vs {seconds(other_wall)}): "
                        "a small loop body paying a per-iteration device cost"
                    ),
                    fix=_fix(functions, False),
                )
            continue
        if run >= limit["min_run_s"]:
            yield Skip(
                NAME,
                f"{cell_label(cell)} calls {', '.join(functions)} ({', '.join(sorted({p for v in functions.values() for p in v}))}) "
                f"on the GPU and ran {seconds(run)}: needs a --timeline summary or a CPU run of the same notebook "
                "(diagnose --other) to tell per-iteration latency from real work",
                cell["index"],
            )
    if needs_sources:
        yield Skip(NAME, f"needs the cell sources to find lax.scan / fori_loop / while_loop: {ctx.missing_sources()}")


RULE = Rule(NAME, "Latency-bound loop", "per-cell timeline summary, or a CPU run plus the cell sources (loop primitives)", evaluate,
            thresholds=THRESHOLDS)
