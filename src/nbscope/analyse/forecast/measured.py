"""Forecast against a real GPU run of the same notebook: per cell, the forecast range, the measured
time and the error (``nbscope forecast CPU_RUN --gpu KEY --measured GPU_RUN``, and ``nbscope compare``
when one run is on a GPU and the other is a CPU run recorded with program data).

Cells are paired by the cell model (:func:`nbscope.record.cells.pair_cells`), and only cells whose
source is the same on both sides are compared (a forecast of edited code says nothing about the new
code). Compile time is left out of both sides of the error: the forecast carries the CPU's compile time
over without forecasting it, and a GPU compiles differently; the error is on the rest (``run``):
measured GPU wall − its JAX compile (and nbscope's own collection time, where recorded), against the forecast range without the carried-over compile term.
The error is the forecast's midpoint (geometric mean of low and high) over the measured time, minus 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from nbscope import _units as units
from nbscope._errors import NbscopeError
from nbscope.analyse.forecast.devices import Device
from nbscope.record.cells import pair_cells
from nbscope.schema.codec import Encoded, Write, given
from nbscope.schema.model import Cell
from nbscope.schema.status import CUT_SHORT

if TYPE_CHECKING:
    from nbscope.analyse.forecast import CellForecast, Forecast
    from nbscope.record.run import RunRecord

SAME_SOURCE = ("hash", "moved")
NUMBA_CACHE_S = 0.05  # a difference in Numba compile between the two runs below this is not one of its cache


@dataclass(frozen=True, slots=True)
class MeasuredRun:
    """The GPU run a forecast is held against."""

    id: int | None
    platform: str | None
    started_at: str
    gpus: tuple[str, ...]  # the GPU names its fingerprint lists


@dataclass(frozen=True, slots=True)
class MeasuredCell:
    """One forecast cell against the measured run, compile left out of both sides."""

    index: int
    line: int | None
    first_line: str
    cpu_s: float
    forecast_low_s: float
    forecast_high_s: float | None
    verdict: str
    measured_s: float | None  # the measured cell's time less its JAX compile (None: not paired or not run)
    measured_wall_s: float | None  # the GPU run's cell, nbscope's own collection left out
    within: bool | None  # the measured time lies in the forecast range (None: unknown, or not measured)
    error: float | None  # the forecast's midpoint over the measured time, minus 1
    # the measured cell's status when it was stopped before its end (timeout, kernel-died): its time a lower bound,
    # with no error, and in range unknown unless that bound is past the forecast's high end
    cut_short: Annotated[str | None, Write(when=given)] = None


@dataclass(frozen=True, slots=True)
class MeasuredTotal:
    """The paired cells added up."""

    measured_s: float
    forecast_low_s: float
    forecast_high_s: float | None
    error: float | None
    cut_short: Annotated[int, Write(when=given)] = 0  # cells cut short: the measured total is a lower bound


@dataclass(frozen=True, slots=True)
class MeasuredComparison(Encoded):
    """A forecast on one device against a measured run of the same notebook, per cell and in total."""

    device: str  # the forecast's device key
    measured_run: MeasuredRun
    cells: tuple[MeasuredCell, ...]
    paired: int  # cells of the same source that ran in the measured run
    within: int  # of those, cells whose measured time lies in the forecast range
    total: MeasuredTotal
    notes: tuple[str, ...]
    # the device's compile is forecast (a TPU's), so both sides keep it; written only then
    with_compile: Annotated[bool, Write(when=given)] = False


@dataclass(frozen=True, slots=True)
class ForecastVsMeasured(Encoded):
    """What ``nbscope compare`` shows of a CPU run's forecast against a GPU run: the comparison, or why none."""

    comparison: MeasuredComparison | None
    cpu_run: int | None
    gpu_run: int | None
    note: str | None  # why there is no comparison
    device: str | None = None  # with a comparison: the device key and name
    device_name: str | None = None

    @property
    def document_keys(self) -> tuple[str, ...]:
        device = ("device", "device_name") if self.comparison is not None else ()
        return ("comparison", "cpu_run", "gpu_run", *device, "note")


def _run_time(cell: Cell) -> float | None:
    """A measured cell's time less its JAX compile and nbscope's own collection (what the forecast, compile
    left out, is compared with)."""
    wall = cell.notebook_wall_s
    if wall is None:
        return None
    return max(0.0, wall - (cell.jax.compile_s if cell.jax is not None else 0.0))


def _numba_cache_s(forecast_cell: Cell, measured: Cell) -> float:
    """Numba compile the CPU run paid in a cell and the measured run did not (its Numba cache on disk was warm),
    negative for the reverse: the same code under another cache, which the forecast carried over as host work and
    the device has no part in. Zero where either run has no Numba figures."""
    if forecast_cell.numba is None or measured.numba is None:
        return 0.0
    return forecast_cell.numba.compile_s - measured.numba.compile_s


def _platform(record: RunRecord) -> str | None:
    from nbscope.analyse.compare import platform_of

    platform: str | None = platform_of(record)["platform"]
    return platform


def measured_gpus(record: RunRecord) -> list[str]:
    """The accelerator names a run lists: its fingerprint's GPUs (what NVML reported: ``Tesla T4``), else the kind
    of device its kernel's JAX ran on (``TPU v5 lite``)."""
    names = [gpu.name for gpu in record.machine().gpus if gpu.name]
    kernel = record.notebook_run().kernel
    backend = kernel.jax_backend if kernel is not None else None
    if not names and backend is not None and backend.device_kind and backend.platform != "cpu":
        names.append(backend.device_kind)
    return names


def against_measured(result: Forecast, measured: RunRecord, device: str) -> MeasuredComparison:
    """Per cell and in total: forecast on ``device`` vs the measured run (a profile on that GPU)."""
    if measured.kind not in ("profile", "trace"):
        raise NbscopeError(f"--measured needs a profile run of the notebook on the GPU, not a {measured.kind} run")
    # The forecast's cells pair with the measured run's cells by source hash (through the run's own cells).
    pairs = pair_cells([c.recorded for c in result.cells], measured.notebook_run().cells)
    paired_cell: dict[int, Cell] = {
        id(p.a): p.b for p in pairs if p.a is not None and p.b is not None and p.match in SAME_SOURCE
    }
    rows = []
    paired = 0
    numba: dict[int, float] = {}  # cells whose Numba compile the two runs' caches made differ, by how much
    forecast_device = result.device(device)
    # A device with compile figures of its own (a TPU) has its compile forecast, not carried over: compared whole.
    whole = forecast_device is not None and forecast_device.forecasts_compile
    for cell in result.cells:
        other = paired_cell.get(id(cell.recorded))
        ran = other is not None and other.ran
        paired += ran
        cache_s = _numba_cache_s(cell.recorded, other) if other is not None and ran else 0.0
        cache_s = cache_s if abs(cache_s) >= NUMBA_CACHE_S else 0.0
        if cache_s:
            numba[cell.index] = cache_s
        rows.append(_row(cell, other if ran else None, device, whole, cache_s))
    if not paired:
        raise NbscopeError("--measured shares no cell with the forecast run (different notebook or version)")
    timed = [r for r in rows if r.measured_s is not None]
    cut_short = sum(1 for r in timed if r.cut_short)
    measured_total = sum(r.measured_s for r in timed if r.measured_s is not None)
    low_total = sum(r.forecast_low_s for r in timed)
    highs = [r.forecast_high_s for r in timed]
    high_total = None if any(h is None for h in highs) else sum(h for h in highs if h is not None)
    if whole and len(timed) == len(rows):
        # Every cell measured: the total is the notebook's own range, whose compile is bounded as a whole (its
        # cells' compile ranges added up are far wider), the range the forecast printed above it.
        low_total, high_total = result.notebook[device].low_s, result.notebook[device].high_s
        low_total = max(0.0, low_total - sum(numba.values()))
        high_total = None if high_total is None else max(0.0, high_total - sum(numba.values()))
    mid_total = (
        low_total if high_total is None else (low_total * high_total) ** 0.5 if low_total > 0 else high_total / 2
    )
    platform = _platform(measured)
    names = measured_gpus(measured)
    notes = _device_notes(forecast_device, platform, names)
    for index, cache_s in numba.items():
        paid, other_run = ("the CPU run", "the measured run") if cache_s > 0 else ("the measured run", "the CPU run")
        notes.append(
            f"cell {index + 1}: Numba compiled {units.seconds(abs(cache_s))} more in {paid} than in {other_run} "
            "(its cache on disk): left out of the forecast compared"
        )
    return MeasuredComparison(
        device=device,
        measured_run=MeasuredRun(
            id=measured.run_id, platform=platform, started_at=measured.started_at, gpus=tuple(names)
        ),
        cells=tuple(rows),
        paired=paired,
        within=sum(1 for r in rows if r.within),
        total=MeasuredTotal(
            measured_s=measured_total,
            forecast_low_s=low_total,
            forecast_high_s=high_total,
            error=(mid_total - measured_total) / measured_total if measured_total > 0 and not cut_short else None,
            cut_short=cut_short,
        ),
        notes=tuple(notes),
        with_compile=whole,
    )


def _row(cell: CellForecast, other: Cell | None, device: str, whole: bool, numba_s: float) -> MeasuredCell:
    """One forecast cell against its measured cell (None: not paired, or it did not run there), the forecast less
    ``numba_s``, the Numba compile the two runs' caches made differ (:func:`_numba_cache_s`)."""
    outcome = cell.gpu[device]
    compile_term = None if whole else next((t for t in outcome.terms if t.kind == "compile"), None)
    compile_low = compile_term.low_s if compile_term else 0.0
    compile_high = compile_term.high_s if compile_term else 0.0
    low = max(0.0, outcome.low_s - compile_low)
    high = None if outcome.high_s is None else max(0.0, outcome.high_s - (compile_high or 0.0))
    measured_s = measured_wall_s = within = error = cut_short = None
    if other is not None:
        low, high = max(0.0, low - numba_s), None if high is None else max(0.0, high - numba_s)
        measured_s, measured_wall_s = (other.notebook_wall_s if whole else _run_time(other)), other.notebook_wall_s
        if measured_s is not None and other.status in CUT_SHORT:  # how long the whole cell takes is not known
            cut_short = other.status
            within = False if high is not None and measured_s > high else None
        elif measured_s is not None:
            within = low <= measured_s and (high is None or measured_s <= high)
            mid = low if high is None else (low * high) ** 0.5 if low > 0 else (low + high) / 2
            error = (mid - measured_s) / measured_s if measured_s > 0 else None
    return MeasuredCell(
        index=cell.index,
        line=cell.line,
        first_line=cell.first_line,
        cpu_s=cell.cpu.wall_s,
        forecast_low_s=low,
        forecast_high_s=high,
        verdict=outcome.verdict,
        measured_s=measured_s,
        measured_wall_s=measured_wall_s,
        within=within,
        error=error,
        cut_short=cut_short,
    )


def _device_notes(forecast_device: Device | None, platform: str | None, names: list[str]) -> list[str]:
    """What the measured run was not: another backend than the forecast's device, or another accelerator."""
    notes: list[str] = []
    expected = forecast_device.platform if forecast_device is not None else "gpu"
    if platform != expected:
        word = expected.upper()
        notes.append(f"the measured run used the {platform} backend, not a {word}: its times measure no {word}")
    if forecast_device is not None and names and platform == expected and not _matches(forecast_device, names[0]):
        notes.append(f"the measured run ran on a {names[0]}, the forecast is for the {forecast_device.name}")
    return notes


def _matches(device: Device, name: str) -> bool:
    lowered = name.lower()
    return device.name.lower() == lowered or any(
        re.search(rf"(?<![a-z0-9]){re.escape(m.lower())}(?![a-z0-9])", lowered) for m in device.match or []
    )


def forecast_vs_measured(
    a: RunRecord, b: RunRecord, *, devices_file: str | Path | None = None
) -> ForecastVsMeasured | None:
    """For ``nbscope compare``: when one run is on an accelerator (a GPU, a TPU) and the other is a CPU run with
    program data, the CPU run's forecast for that device against the device's run, per cell
    (:func:`against_measured`).

    None when the pair is not such a pair; a result without a comparison and with a ``note`` when the device is
    not in the device table (its name and how to add it) or the runs share no cell.
    """
    from nbscope.analyse.forecast import forecast
    from nbscope.analyse.forecast.devices import load_table, resolve

    platforms = {id(r): _platform(r) for r in (a, b)}
    cpu = next((r for r in (a, b) if platforms[id(r)] == "cpu" and r.notebook_run().program_data is not None), None)
    gpu = next((r for r in (a, b) if platforms[id(r)] not in (None, "cpu")), None)
    if cpu is None or gpu is None:
        return None
    gpu_label = f"run {gpu.run_id}" if gpu.run_id is not None else f"the {platforms[id(gpu)]} run"
    cpu_label = f"run {cpu.run_id}" if cpu.run_id is not None else "the CPU run"
    table = load_table(devices_file)
    names = measured_gpus(gpu)
    without = ForecastVsMeasured(comparison=None, cpu_run=cpu.run_id, gpu_run=gpu.run_id, note=None)
    if not names:
        return replace(without, note=f"{gpu_label}'s fingerprint names no accelerator: no forecast to compare it with")
    try:
        (device,) = resolve(table, names[0])
    except NbscopeError:
        return replace(
            without,
            note=(
                f"{gpu_label} ran on a {names[0]}, which is not in the device table ({table.known()}): add it "
                "in a device file or calibrate it (docs/forecast.md) to compare it with the forecast"
            ),
        )
    result = forecast(cpu, [device.key], table=table, run_label=cpu_label)
    try:
        comparison = against_measured(result, gpu, device.key)
    except NbscopeError as exc:
        return replace(without, note=str(exc))
    return replace(without, comparison=comparison, device=device.key, device_name=device.name)
