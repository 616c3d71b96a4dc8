"""What a forecast tells the rest of nbscope: the GPUs to forecast for, the loops that make a cell slower
on a GPU, and what float64 costs on a GPU with weak float64.

``diagnose`` turns these into forecast findings on a CPU run, ``recommend`` into a backend choice when
no GPU run exists, and ``audit --forecast`` into each lecture's GPU blast radius. Every figure comes
from :func:`nbscope.analyse.forecast.forecast` (counts from the run × the device table), never from a
guess: a loop whose trip count is unknown has no upper bound and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from nbscope._errors import NbscopeError
from nbscope.analyse.forecast import Forecast, check_record
from nbscope.analyse.forecast.devices import Device, DeviceTable
from nbscope.analyse.forecast.model import Term, observed_loops, program_terms
from nbscope.analyse.forecastable import forecast_unavailable, uses_jax
from nbscope.collect._gpu_classes import WEAK_FP64_RATIO
from nbscope.schema.programs import Program, Work

if TYPE_CHECKING:
    from nbscope.record.run import RunRecord

DEFAULT_GPUS = ["t4"]  # the GPU of the seed's runner: what a CPU run is forecast for unless told
AnyWork = TypeVar("AnyWork", bound=Work)  # a program's entry, or a loop's body per iteration


def gpus_of(record: RunRecord, gpus: str | list[str] | None = None) -> list[str]:
    """The GPUs to forecast ``record`` for: those given, else those named when it was recorded
    (``profile --forecast``), else the T4."""
    if gpus:
        names = gpus.split(",") if isinstance(gpus, str) else list(gpus)
        return [n.strip() for n in names if n.strip()]
    return list(record.run_settings().forecast) or list(DEFAULT_GPUS)


def require_forecast(record: RunRecord, platform: str | None, run_label: str) -> None:
    """Refuse (one line) a run that an explicit forecast request cannot apply to."""
    check_record(record, run_label)  # the recording command when program data is missing
    reason = forecast_unavailable(record, platform)
    if reason is not None and uses_jax(record):
        raise NbscopeError(f"{run_label}: no GPU forecast: {reason}")


# ---- loops -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoopSlowdown:
    """One cell's loops on a GPU against the cell's measured CPU time."""

    index: int
    cpu_s: float
    gpu_low_s: float  # the whole cell on the GPU
    gpu_high_s: float | None
    loop_low_s: float  # its loop terms added up
    loop_high_s: float | None  # None: a loop of unknown trip count with no bound
    verdict: str
    functions: tuple[str, ...]
    loops: tuple[Term, ...]  # each loop term (``lax.scan of 1,000,000 iterations × 8–8.2 µs``)


def loop_slowdowns(result: Forecast, device: str) -> list[LoopSlowdown]:
    """Per cell, the forecast of its loops on ``device`` against the cell's measured CPU time; cells without
    loops are left out."""
    rows = []
    for cell in result.cells:
        outcome = cell.gpu[device]
        loops = tuple(t for t in outcome.terms if t.kind == "loop")
        if not loops:
            continue
        highs = [t.high_s for t in loops]
        rows.append(
            LoopSlowdown(
                index=cell.index,
                cpu_s=cell.cpu.wall_s,
                gpu_low_s=outcome.low_s,
                gpu_high_s=outcome.high_s,
                loop_low_s=sum(t.low_s for t in loops),
                loop_high_s=None if any(h is None for h in highs) else sum(h for h in highs if h is not None),
                verdict=outcome.verdict,
                functions=tuple(sorted({t.function for t in loops if t.function})),
                loops=loops,
            )
        )
    return rows


# ---- float64 ---------------------------------------------------------------------------------------


def fp64_share(device: Device) -> float:
    """The device's float64 peak as a share of its float32 peak (mid figures)."""
    return device.figure("fp64_tflops").mid / device.figure("fp32_tflops").mid


def weak_float64(device: Device) -> bool:
    """Float64 at 1/32 of float32 or less (T4, L4, A10G), the class ``diagnose`` warns about."""
    return fp64_share(device) <= WEAK_FP64_RATIO * 1.05  # T4: 0.25 / 8.1 ≈ 1/32.4


def _as_float32(program: Program) -> Program:
    """The same program with its float64 arithmetic counted at the float32 rate (same bytes: a float32
    twin also halves the traffic, so the difference this gives is a lower bound)."""
    return replace(
        program,
        entry=_without_float64(program.entry),
        loops=tuple(replace(loop, per_iteration=_without_float64(loop.per_iteration)) for loop in program.loops),
    )


def _without_float64(work: AnyWork) -> AnyWork:
    """The work with no float64 arithmetic (its flops and transcendentals then count at the float32 rate)."""
    return replace(work, flops_f64=0.0, transcendentals_f64=0.0)


def _has_float64(program: Program) -> bool:
    regions: list[Work] = [program.entry, *(loop.per_iteration for loop in program.loops)]
    return any((region.flops_f64 or 0.0) > 0 or (region.transcendentals_f64 or 0.0) > 0 for region in regions)


@dataclass(frozen=True, slots=True)
class Float64Cost:
    """One cell's float64 JAX work on a GPU: as run, and with its float64 arithmetic at the float32 rate."""

    index: int
    cpu_s: float | None
    functions: tuple[str, ...]
    float64_low_s: float
    float64_high_s: float | None  # None: a loop of unknown trip count
    float32_low_s: float
    float32_high_s: float | None


def float64_costs(record: RunRecord, device: Device, table: DeviceTable) -> list[Float64Cost]:
    """Per cell with float64 JAX work: its forecast time on ``device`` as run, and the same programs with
    their float64 arithmetic at the float32 rate; the difference is what float64 costs there.

    A loop's body counts once per iteration: its trip count as compiled, else as the CPU run's trace
    observed it, else estimated from the loop's CPU time (as the forecast reads them)."""
    from nbscope.analyse.forecast import cpu_rates, forecastable_cells

    run = record.notebook_run()
    measured = forecastable_cells(run)
    rates = cpu_rates(list(measured.values()), run)
    rows = []
    for cell in run.cells:
        seen = measured.get(cell.index)
        low = {"float64": 0.0, "float32": 0.0}
        high: dict[str, float | None] = {"float64": 0.0, "float32": 0.0}
        functions: set[str] = set()
        for execution in seen.executions if seen is not None else ():
            program = run.program(execution.program)
            if program is None or not _has_float64(program):
                continue
            count = execution.runs
            cpu_each, observed = observed_loops(execution)
            for side, variant in (("float64", program), ("float32", _as_float32(program))):
                # Only arithmetic differs between the twins: loop machinery, launches and dispatch cancel.
                terms = [
                    t
                    for t in program_terms(variant, device, table.model, cpu_each, observed, rates)
                    if t.kind in ("work", "loop")
                ]
                low[side] += count * sum(t.low_s for t in terms)
                so_far = high[side]
                if so_far is not None:
                    highs = [t.high_s for t in terms]
                    high[side] = (
                        None
                        if any(h is None for h in highs)
                        else (so_far + count * sum(h for h in highs if h is not None))
                    )
            functions.add(str(program.function or program.key))
        if functions:
            rows.append(
                Float64Cost(
                    index=cell.index,
                    cpu_s=cell.notebook_wall_s,
                    functions=tuple(sorted(functions)),
                    float64_low_s=low["float64"],
                    float64_high_s=high["float64"],
                    float32_low_s=low["float32"],
                    float32_high_s=high["float32"],
                )
            )
    return rows
