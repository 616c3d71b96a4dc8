"""Latency-bound loop: ``lax.scan`` / ``fori_loop`` / ``while_loop`` with a small body on a device that
pays a fixed cost per iteration (XLA:GPU involves the host in every iteration of dynamic control flow:
microseconds per step, where a CPU pays nanoseconds).

Evidence, strongest first: the cell's ``timeline`` summary classifies it as launch- or latency-bound
(``nbscope profile --timeline``); or the same cell ran many times faster in a CPU run (``other``) and
its source calls a loop primitive. A slow loop cell on a GPU with neither is reported as not evaluated.

On a CPU run recorded with program data (``nbscope profile --forecast``), the rule fires as a forecast
risk: a cell forecast to take ``min_ratio`` times its measured CPU time and ``min_delta_s`` more, at
least half of the difference in its loops (iterations × the GPU's per-iteration cost, from the device
table), on a GPU the run is forecast for (``diagnose(gpus=...)``, else those named at record time, else the T4). A loop whose trip
count is only known at run time is never guessed: it is reported as not evaluated when it could matter.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

from nbscope.analyse.diagnose import _forecast
from nbscope.analyse.diagnose._base import Context, Finding, Outcome, Rule, Skip, seconds, severity
from nbscope.schema.model import Cell
from nbscope.schema.timeline import TimelineSummary

if TYPE_CHECKING:  # the forecast is imported only when a run can be forecast
    from nbscope.analyse.forecast import Forecast, NotebookForecast, Term
    from nbscope.analyse.forecast.devices import Device
    from nbscope.analyse.forecast.risks import LoopSlowdown

NAME = "latency-bound-loop"
LATENCY_WORDS = ("launch", "latency")
THRESHOLDS = {
    "min_ratio": 3.0,  # GPU cell at least this many times slower than the same cell on CPU ...
    "min_delta_s": 0.5,  # ... and at least this much slower
    "min_run_s": 1.0,  # a loop cell below this is not worth asking for a timeline
}


def _label(index: int, cell: Cell | None) -> str:
    return cell.label if cell is not None else f"cell {index + 1}"


def _timeline(cell: Cell) -> TimelineSummary | None:
    """The cell's timeline summary, when its trace was read and classified."""
    summary = cell.timeline_summary
    return summary if summary is not None and summary.classification and not summary.error else None


class _Base(TypedDict):  # the evidence every finding of this rule has
    platform: str | None
    platform_source: str | None
    wall_s: float
    run_s: float
    loop_functions: dict[str, list[str]]


def _timeline_evidence(timeline: Mapping[str, object]) -> dict[str, object]:
    # Scalars and short lists only: a timeline may carry long op tables.
    return {
        k: v
        for k, v in timeline.items()
        if isinstance(v, (int, float, str, bool)) or v is None or (isinstance(v, list) and len(v) <= 5)
    }


def _loop_functions(ctx: Context, index: int, cell: Cell | None) -> dict[str, list[str]]:
    """Notebook functions with loop primitives that cell ``index`` calls or compiles."""
    if not ctx.has_sources:
        return {}
    called = set(ctx.code.calls_in(index))
    called |= {f.name for f in cell.jax.functions} if cell is not None and cell.jax is not None else set()
    found = {}
    for name in sorted(called):  # a set: sorted, so the evidence reads the same in every process
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


def _slow_and_unbounded(
    result: Forecast, devices: Sequence[Device], limit: Mapping[str, float]
) -> tuple[dict[int, dict[str, LoopSlowdown]], dict[int, dict[str, LoopSlowdown]]]:
    """By cell and GPU: the loops the forecast makes the cause of a slower cell, and those it cannot bound."""
    from nbscope.analyse.forecast.risks import loop_slowdowns

    slow: dict[int, dict[str, LoopSlowdown]] = {}
    unbounded: dict[int, dict[str, LoopSlowdown]] = {}
    for device in devices:
        for row in loop_slowdowns(result, device.key):
            cpu = float(row.cpu_s)
            slower_by = row.gpu_low_s - cpu
            # The cell (compile and host work carried over) is forecast min_ratio times slower, and its loops
            # alone make at least half of the difference: they are the cause.
            if (
                row.gpu_low_s >= limit["min_ratio"] * cpu
                and slower_by >= limit["min_delta_s"]
                and row.loop_low_s >= slower_by / 2
            ):
                slow.setdefault(row.index, {})[device.key] = row
            elif row.loop_high_s is None or (
                any(loop.iterations is None for loop in row.loops) and row.loop_high_s - cpu >= limit["min_delta_s"]
            ):
                unbounded.setdefault(row.index, {})[device.key] = row
    return slow, unbounded


def _unbounded_skips(
    ctx: Context, unbounded: Mapping[int, Mapping[str, LoopSlowdown]], findings: Mapping[int, Finding]
) -> list[Skip]:
    """A Skip for each cell whose loop the forecast cannot bound (and that has no finding)."""
    skips: list[Skip] = []
    for index, rows in unbounded.items():
        if index in findings:
            continue
        cell = ctx.run.cell(index)
        key, row = next(iter(rows.items()))
        loop = next((loop for loop in row.loops if loop.iterations is None), row.loops[0])
        skips.append(
            Skip(
                NAME,
                f"forecast: {_label(index, cell)} runs {loop.words}: {_forecast.on_a(key)} from "
                f"{_forecast.seconds_range(row.loop_low_s, row.loop_high_s)}; a trip count known only at run "
                "time is not guessed (profile with --timeline on a GPU, or diagnose a GPU run, to measure it)",
                index,
            )
        )
    return skips


def _forecast_outcomes(ctx: Context, limit: Mapping[str, float]) -> tuple[dict[int, Finding], list[Skip]]:
    """Forecast findings by cell, on a CPU run with program data; Skips for loops the forecast cannot bound."""
    found = ctx.forecast
    if found.result is None:
        return {}, []
    slow, unbounded = _slow_and_unbounded(found.result, found.devices, limit)
    notebook = found.result.notebook
    findings: dict[int, Finding] = {}
    for index, rows in slow.items():
        cell = ctx.run.cell(index)
        first = next(iter(rows.values()))
        stake = max(r.gpu_low_s - float(r.cpu_s) for r in rows.values())
        key_of_worst = max(rows, key=lambda k: rows[k].gpu_low_s - float(rows[k].cpu_s))
        functions = sorted({f for r in rows.values() for f in r.functions})
        per_gpu = ", ".join(
            f"{_forecast.on_a(key)} {_forecast.seconds_range(r.gpu_low_s, r.gpu_high_s)}" for key, r in rows.items()
        )
        loops = "; ".join(dict.fromkeys(_loop_words(loop) for loop in first.loops))
        names = f" in {', '.join(f'`{n}`' for n in functions)}" if functions else ""
        figures = {
            key: {
                "gpu_low_s": r.gpu_low_s,
                "gpu_high_s": r.gpu_high_s,
                "loop_low_s": r.loop_low_s,
                "loop_high_s": r.loop_high_s,
                "verdict": r.verdict,
                "loops": [loop.words for loop in r.loops],
            }
            for key, r in rows.items()
        }
        findings[index] = Finding(
            rule=NAME,
            title=f"Latency-bound loop (forecast: {', '.join(k.upper() for k in rows)})",
            cell_index=index,
            severity=severity(stake, notebook[key_of_worst].low_s),
            confidence=0.7,
            evidence={
                "platform": ctx.backend.platform,
                "cpu_wall_s": round(float(first.cpu_s), 4),
                "loop_functions": _loop_functions(ctx, index, cell),
                "forecast_functions": functions,
                "forecast": figures,
                "forecast_run": ctx.record.run_id,
                "seconds_at_stake": round(stake, 4),
            },
            summary=(
                f"forecast: {per_gpu} for {_label(index, cell)} vs {seconds(float(first.cpu_s))} measured on this CPU: "
                f"{loops}{names}, each iteration paying the GPU's per-iteration cost "
                f"({first.loops[0].overhead_text or 'its per-iteration cost'} on the {next(iter(rows)).upper()})"
            ),
            fix=_forecast_fix(functions, notebook, rows),
            forecast=list(rows),
        )
    return findings, _unbounded_skips(ctx, unbounded, findings)


def _loop_words(loop: Term) -> str:
    """``lax.scan of 1,000,000 iterations`` (``2 calls of ...`` when the cell calls it twice)."""
    iterations = loop.iterations
    count = f"{iterations:,} iterations" if iterations is not None else "an unknown number of iterations"
    calls = int(loop.calls or 1)
    return (f"{calls} calls of " if calls > 1 else "") + f"{loop.name or 'a loop'} of {count}"


def _forecast_fix(functions: list[str], notebook: Mapping[str, NotebookForecast], rows: Mapping[str, object]) -> str:
    names = ", ".join(f"`{n}`" for n in functions) or "this cell's loop"
    keep = {e.function: e for key in rows for e in notebook[key].keep_on_cpu}
    example = next((keep[n].change.example for n in functions if n in keep and keep[n].change.example), None)
    text = (
        f"Nothing to change on this CPU. Where the notebook runs on a GPU, run {names} on the CPU: wrap the "
        "call in `with jax.default_device(jax.devices('cpu')[0]):`"
    )
    if example:
        text += ", e.g. `" + " ".join(line.strip() for line in example.splitlines()) + "`"
    return (
        text + "; a jitted function runs where its inputs live, so inputs already on the GPU move with "
        "`jax.device_put(x, jax.devices('cpu')[0])`."
    )


def _timeline_finding(
    ctx: Context, cell: Cell, timeline: TimelineSummary, base: _Base, functions: dict[str, list[str]]
) -> Finding:
    """A cell whose device timeline (``--timeline``) reads as latency-bound: low severity on a CPU, where the
    loop costs what it costs."""
    platform, run = base["platform"], cell.run_s or 0.0
    on_cpu = platform == "cpu"
    return Finding(
        rule=NAME,
        title="Latency-bound loop",
        cell_index=cell.index,
        severity="low" if on_cpu else severity(run, ctx.total_wall),
        confidence=0.9 if functions else 0.75,
        evidence={
            **base,
            "timeline": _timeline_evidence(cell.timeline or {}),
            "seconds_at_stake": round(0.0 if on_cpu else run, 4),
        },
        summary=(
            f"{cell.label} is {timeline.classification} on the {platform or 'device'}"
            + (f": {_named(functions)}" if functions else "")
            + f", {seconds(run)} of run time"
            + (f", device busy {seconds(timeline.device_busy_s)}" if timeline.device_busy_s is not None else "")
        ),
        fix=_fix(functions, on_cpu),
    )


def evaluate(ctx: Context) -> Iterator[Outcome]:
    limit = ctx.limits(NAME, THRESHOLDS)
    platform = ctx.backend.platform
    other_platform = ctx.other_backend.platform if ctx.other_backend is not None else None
    needs_sources = False
    forecast_findings: dict[int, Finding] = {}
    if platform == "cpu":
        forecast_findings, forecast_skips = _forecast_outcomes(ctx, limit)
        yield from forecast_skips
        yield from forecast_findings.values()
    for cell in ctx.run.cells:
        if not ctx.ran(cell):
            continue
        if cell.index in forecast_findings:
            continue  # the forecast finding says more than this CPU's own timeline
        # a cell that ran has its wall; nbscope's own collection (--forecast) is no part of it
        wall, run = cell.notebook_wall_s or 0.0, cell.run_s or 0.0
        functions = _loop_functions(ctx, cell.index, cell)
        timeline = _timeline(cell)
        base: _Base = {
            "platform": platform,
            "platform_source": ctx.backend.source,
            "wall_s": round(wall, 4),
            "run_s": round(run, 4),
            "loop_functions": functions,
        }
        if timeline is not None and any(w in str(timeline.classification).lower() for w in LATENCY_WORDS):
            yield _timeline_finding(ctx, cell, timeline, base, functions)
            continue
        if platform != "gpu":
            continue
        if not ctx.has_sources:
            needs_sources = True
            continue
        if not functions:
            continue
        paired = ctx.other_cells.get(cell.index) if other_platform == "cpu" else None
        other_wall = paired.notebook_wall_s if paired is not None else None
        if other_wall is not None and other_wall >= 0:
            ratio = wall / other_wall if other_wall > 0 else float("inf")
            if ratio >= limit["min_ratio"] and wall - other_wall >= limit["min_delta_s"]:
                at_stake = wall - other_wall
                yield Finding(
                    rule=NAME,
                    title="Latency-bound loop",
                    cell_index=cell.index,
                    severity=severity(at_stake, ctx.total_wall, floor="medium"),
                    confidence=0.8,
                    evidence={
                        **base,
                        "cpu_wall_s": round(other_wall, 4),
                        "gpu_over_cpu": round(ratio, 2),
                        "cpu_run": ctx.other.run_id if ctx.other else None,
                        "seconds_at_stake": round(at_stake, 4),
                    },
                    summary=(
                        f"{cell.label} runs {_named(functions)} "
                        f"{ratio:.0f}× slower on the GPU than on the CPU ({seconds(wall)} vs {seconds(other_wall)}): "
                        "a small loop body paying a per-iteration device cost"
                    ),
                    fix=_fix(functions, False),
                )
            continue
        if run >= limit["min_run_s"]:
            yield Skip(
                NAME,
                f"{cell.label} calls {', '.join(functions)} ({', '.join(sorted({p for v in functions.values() for p in v}))}) "
                f"on the GPU and ran {seconds(run)}: needs a --timeline summary or a CPU run of the same notebook "
                "(diagnose --other) to tell per-iteration latency from real work",
                cell.index,
            )
    if needs_sources:
        yield Skip(NAME, f"needs the cell sources to find lax.scan / fori_loop / while_loop: {ctx.missing_sources()}")


RULE = Rule(NAME, evaluate, thresholds=THRESHOLDS)
