"""The backend a notebook should use (CPU, GPU, or GPU with some functions pinned to the CPU): from the measured
cells of a CPU run and a GPU run, or, with no GPU run, from the GPU forecast of a CPU run with program data.

A recommendation, not a diagnosis: ``diagnose`` names causes; this chooses between backends from figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nbscope import _units as units
from nbscope.analyse import compare as compare_module
from nbscope.record.cells import CellPair, pair_cells
from nbscope.record.run import RunRecord
from nbscope.record.sources import sources_of
from nbscope.schema.codec import Encoded
from nbscope.schema.model import Cell

if TYPE_CHECKING:
    from nbscope.analyse.diagnose._source import NotebookCode
    from nbscope.analyse.forecast import CellForecast, Forecast, NotebookForecast, NotebookVerdict, Plan
    from nbscope.analyse.forecast.devices import Device

__all__ = [
    "Estimate",
    "ForecastGain",
    "ForecastPin",
    "GpuChoice",
    "MeasuredPin",
    "Recommendation",
    "RunOnBackend",
    "RunTotal",
    "recommend",
    "recommend_forecast",
]

PIN_MIN_GAIN_S = 0.1  # a cell moves to the CPU only if that saves at least this ...
PIN_MIN_RATIO = 1.3  # ... and the accelerator is at least this much slower on it
MIXED_MIN_GAIN = 0.05  # mixed must beat the best single backend by 5 % to be worth the extra code


# ---- the result ------------------------------------------------------------------------------------
# ``Recommendation.to_dict()`` (the codec's encoding) is what ``compare --json`` and ``diagnose --json`` print as "recommendation".


@dataclass(frozen=True, slots=True)
class Estimate:
    """One estimated total: ``name`` is a backend (``cpu``, ``gpu``, ``mixed``) or, for a forecast, an end of
    its range (``gpu_low``, ``mixed_high``)."""

    name: str
    seconds: float | None

    @property
    def key(self) -> str:
        return f"{self.name}_s"


@dataclass(frozen=True, slots=True)
class RunOnBackend:
    """One of the two runs compared, and the backend it used."""

    run_id: int | None
    platform: str | None


@dataclass(frozen=True, slots=True)
class RunTotal:
    """A run the choice was made from, and its measured cells added up."""

    run_id: int | None
    total_s: float


@dataclass(frozen=True, slots=True)
class MeasuredPin:
    """A cell measured on both backends: one worth pinning to the CPU, or one faster on the accelerator."""

    cell: int
    line: int | None
    first_line: str
    functions: tuple[str, ...]  # the JAX functions it compiles or calls
    cpu_s: float
    accelerator: str  # the accelerator's platform (``gpu``, ``tpu``)
    accelerator_s: float
    saving_s: float
    # The accelerator's runtime start in this cell (its time beyond compile), not in saving_s: pinning the cell
    # moves it to the next cell that touches the device. None: the runtime started elsewhere.
    runtime_start_s: float | None = None

    @property
    def document_keys(self) -> tuple[str | tuple[str, str], ...]:
        return (
            "cell",
            "line",
            "first_line",
            "functions",
            "cpu_s",
            (f"{self.accelerator}_s", "accelerator_s"),
            "saving_s",
            *(("runtime_start_s",) if self.runtime_start_s is not None else ()),
        )


@dataclass(frozen=True, slots=True)
class ForecastPin:
    """A function the forecast keeps on the CPU: its cells, times and the code change."""

    cell: int | None  # its first cell
    cells: tuple[int, ...]
    line: int | None
    first_line: str | None
    functions: tuple[str, ...]
    cpu_s: float
    gpu_low_s: float
    gpu_high_s: float | None
    saving_s: float
    change: str
    example: str | None


@dataclass(frozen=True, slots=True)
class ForecastGain:
    """A function the forecast makes faster on the GPU."""

    functions: tuple[str, ...]
    cells: tuple[int, ...]
    cell: int | None
    cpu_s: float
    gpu_low_s: float
    gpu_high_s: float | None
    saving_s: float


@dataclass(frozen=True, slots=True)
class GpuChoice:
    """One GPU's forecast in a forecast recommendation: verdict, totals and the functions to keep on the CPU."""

    name: str
    verdict: str
    all_on_gpu: str
    cpu_s: float
    low_s: float
    high_s: float | None
    keep_on_cpu: tuple[str, ...]
    plan: Plan | None


@dataclass(frozen=True, slots=True)
class Recommendation(Encoded):
    """The backend a notebook should use, and why (see :func:`recommend` for the fields)."""

    recommendation: str | None  # cpu, gpu (the accelerator's platform), mixed; None: no choice to make
    reason: str
    basis: str  # measured | forecast
    estimates: tuple[Estimate, ...] | None
    pinned: tuple[MeasuredPin | ForecastPin, ...]
    caveats: tuple[str, ...]
    runs: Mapping[str, RunOnBackend | RunTotal]
    # A choice between a CPU run and an accelerator run sets these three (a forecast sets the first two).
    faster_on_accelerator: tuple[MeasuredPin | ForecastGain, ...] | None = None
    accelerator: str | None = None
    same_host: bool | None = None
    forecast: Mapping[str, GpuChoice] | None = None  # a forecast's: per GPU key
    device: str | None = None  # a forecast's: the GPU the choice was made for

    def estimate(self, name: str) -> float | None:
        """The estimate named ``name`` (``cpu``, ``gpu_low``), None when there is none."""
        return next((e.seconds for e in self.estimates or () if e.name == name), None)

    @property
    def document_keys(self) -> tuple[str | tuple[str, str], ...]:
        """Its keys in the order each kind has always listed them."""
        head = ("runs", "recommendation", "basis", ("estimates", "estimates_by_key"), "pinned")
        faster = ("faster_on_accelerator", "faster_listed")
        if self.basis == "forecast":
            device = ("device",) if self.device is not None else ()
            return (*head, faster, "accelerator", "caveats", ("forecast", "forecast_by_gpu"), "reason", *device)
        accelerator = (faster, "accelerator", "same_host") if self.accelerator is not None else ()
        return (*head, "caveats", "reason", *accelerator)

    @property
    def estimates_by_key(self) -> dict[str, float | None] | None:
        return {e.key: e.seconds for e in self.estimates} if self.estimates is not None else None

    @property
    def faster_listed(self) -> tuple[MeasuredPin | ForecastGain, ...]:
        return self.faster_on_accelerator or ()

    @property
    def forecast_by_gpu(self) -> Mapping[str, GpuChoice]:
        return self.forecast or {}


def _jax_work(cell: Cell | None, calls: set[str], jitted: set[str]) -> set[str]:
    """User JAX functions a cell compiles or (by its source) calls."""
    if cell is None:
        return set()
    names = {f.name for f in cell.jax.of_kind("user")} if cell.jax else set()
    names |= calls & jitted
    return names


def _total_s(run: RunRecord) -> float:
    """A run's measured cell times added up (kernel start excluded)."""
    return sum(c.wall_s or 0.0 for c in run.notebook_run().cells)


def recommend(a: RunRecord, b: RunRecord | None = None, *, gpus: str | Sequence[str] | None = None) -> Recommendation:
    """Which backend this notebook should use, from the measured per-cell figures of a CPU and a GPU run,
    or, when no GPU run exists, from the GPU forecast of a CPU run recorded with program data.

    Measured (``basis: "measured"``): estimates ``cpu`` and ``gpu`` add each run's measured cell times;
    ``mixed`` is the GPU run with every JAX cell that ran faster on the CPU taken at its CPU time (those
    cells pinned to the CPU; None when nothing is worth pinning).

    The :class:`Recommendation`: ``recommendation`` (``cpu``, ``gpu``, ``mixed`` or None), ``reason``,
    ``basis``, ``estimates``, ``pinned`` (cell, line, first line, functions, CPU and accelerator times,
    saving), ``faster_on_accelerator``, ``accelerator`` (the platform name: ``gpu`` for CUDA/ROCm,
    ``tpu``), ``same_host``, ``caveats`` and ``runs``; ``to_dict()`` is its JSON. Two runs on one backend give
    ``recommendation`` None with a reason, unless they are CPU runs and one holds program data: then the
    forecast decides.

    Forecast (``basis: "forecast"``; ``b`` omitted, or two CPU runs): see :func:`recommend_forecast`.
    """
    compare_module.check_profile(a, "A")
    if b is None:
        return recommend_forecast(a, gpus=gpus)
    compare_module.check_profile(b, "B")
    pa, pb = compare_module.platform_of(a)["platform"], compare_module.platform_of(b)["platform"]
    runs = {"a": RunOnBackend(a.run_id, pa), "b": RunOnBackend(b.run_id, pb)}
    choice, estimates = None, None
    if pa == pb:
        with_programs = [r for r in (a, b) if r.notebook_run().program_data is not None]
        if pa == "cpu" and with_programs:
            return recommend_forecast(with_programs[0], gpus=gpus)
        reason = f"both runs used the {pa} backend: nothing to choose between"
    elif "cpu" not in (pa, pb):
        ta, tb = (r.notebook_run().totals.wall_s for r in (a, b))
        if ta is not None and tb is not None:
            choice, estimates = (pa if ta <= tb else pb), (Estimate(pa, ta), Estimate(pb, tb))
        reason = f"neither run used the CPU ({pa} vs {pb}): no mixed estimate"
    else:
        cpu, acc = (a, b) if pa == "cpu" else (b, a)
        return _measured_choice(cpu, acc, pb if pa == "cpu" else pa)
    return Recommendation(
        recommendation=choice, reason=reason, basis="measured", estimates=estimates, pinned=(), caveats=(), runs=runs
    )


_s = units.seconds


# ---- backend recommendation from a forecast ---------------------------------------------------------

_CHOICE: dict[NotebookVerdict, str] = {
    "mixed": "mixed",
    "slower": "cpu",
    "similar": "cpu",
    "faster": "gpu",
    "uncertain": "cpu",
    "unchanged": "cpu",
    "fails": "cpu",  # cells raise there: the CPU, unless the failing functions are kept on it (the plan)
}


def _gpu_choices(forecast_result: Forecast) -> dict[str, GpuChoice]:
    """Per GPU key: the notebook's verdict and totals, and the functions kept on the CPU."""
    choices: dict[str, GpuChoice] = {}
    for each in forecast_result.devices:
        notebook = forecast_result.notebook[each.key]
        choices[each.key] = GpuChoice(
            name=each.name,
            verdict=notebook.verdict,
            all_on_gpu=notebook.all_on_gpu,
            cpu_s=notebook.cpu_s,
            low_s=notebook.low_s,
            high_s=notebook.high_s,
            keep_on_cpu=tuple(e.function for e in notebook.keep_on_cpu),
            plan=notebook.plan,
        )
    return choices


def _forecast_estimates(notebook: NotebookForecast) -> list[Estimate]:
    """The CPU run's time, the GPU's range with everything on it, and with the kept functions on the CPU."""
    estimates = [
        Estimate("cpu", round(notebook.cpu_s, 4)),
        Estimate("gpu_low", round(notebook.low_s, 4)),
        Estimate("gpu_high", None if notebook.high_s is None else round(notebook.high_s, 4)),
    ]
    plan = notebook.plan
    if plan:
        estimates += [
            Estimate("mixed_low", round(plan.low_s, 4)),
            Estimate("mixed_high", None if plan.high_s is None else round(plan.high_s, 4)),
        ]
    return estimates


def recommend_forecast(
    record: RunRecord,
    *,
    gpus: str | Sequence[str] | None = None,
    devices_file: str | Path | None = None,
    made: Forecast | None = None,
) -> Recommendation:
    """The backend choice for a notebook that has no GPU run: from the GPU forecast of a CPU run recorded
    with program data (``nbscope profile --forecast``), for ``gpus`` (else those named when it was
    recorded, else the T4); the choice is made for the first GPU, each GPU's figures are in ``forecast``.

    The same fields as :func:`recommend`, with ``basis: "forecast"``, a reason that says it is a forecast,
    ``estimates`` as ranges (``cpu`` measured; ``gpu_low`` / ``gpu_high`` with everything on the GPU;
    ``mixed_low`` / ``mixed_high`` with the functions the forecast keeps on the CPU), ``pinned`` per
    such function (its cells, the code change), ``device`` and ``forecast``: per GPU key its verdict and
    totals. A run without program data, or one that ran on a GPU, is refused with one line; a run with no
    JAX gets ``recommendation`` None and says why. ``made``: this run's forecast, already made for these GPUs
    (a diagnosis made it), used instead of making it again.
    """
    from nbscope.analyse.forecast import forecast, raising_functions
    from nbscope.analyse.forecast.risks import gpus_of, require_forecast
    from nbscope.analyse.forecastable import uses_jax

    compare_module.check_profile(record, "the run")
    platform = compare_module.platform_of(record)["platform"]
    label = compare_module.label(record, "the run")
    require_forecast(record, platform, label)
    runs = {"cpu": RunTotal(record.run_id, round(_total_s(record), 4))}
    if not uses_jax(record):
        return Recommendation(
            recommendation=None,
            basis="forecast",
            estimates=None,
            pinned=(),
            faster_on_accelerator=(),
            accelerator="gpu",
            caveats=(),
            forecast={},
            runs=runs,
            reason=(
                "forecast: the notebook runs no JAX, so NumPy, Numba and Python run on the CPU whatever "
                "GPU the machine has: nothing to choose between"
            ),
        )
    keys = gpus_of(record, gpus if gpus is None or isinstance(gpus, str) else list(gpus))
    if made is not None and [d.key for d in made.devices] == list(keys):
        forecast_result = made
    else:
        forecast_result = forecast(record, keys, devices_file=devices_file)
    choices = _gpu_choices(forecast_result)
    device = forecast_result.devices[0]
    notebook = forecast_result.notebook[device.key]
    choice = _CHOICE[notebook.verdict]
    choice = device.platform if choice == "gpu" else choice  # the accelerator's platform: gpu or tpu
    raising = raising_functions(forecast_result.cells, device.key)
    estimates = _forecast_estimates(notebook)
    pinned, gains = _forecast_pinned_and_gains(notebook, {c.index: c for c in forecast_result.cells})
    loop = device.figure("loop_iteration_us")
    return Recommendation(
        recommendation=choice,
        reason=_forecast_reason(record, device, choice, notebook, raising),
        basis="forecast",
        estimates=tuple(estimates),
        pinned=pinned,
        faster_on_accelerator=gains,
        accelerator=device.platform,
        runs=runs,
        forecast=choices,
        device=device.key,
        caveats=(
            "a forecast from a CPU run, not a measurement: loops at the device table's per-iteration cost "
            f"({device.name}: {loop.low:g}–{loop.high:g} µs per iteration, {loop.basis}), work on a roofline of its "
            f"peaks, host work carried over as measured on this CPU, XLA:{device.kind} compile derived from this "
            f"CPU's; see docs/forecast.md, and measure with a {device.kind} run (nbscope compare CPU_RUN "
            f"{device.kind}_RUN) when one exists",
            *(f"cell {f.index + 1}: {f.reason}" for f in forecast_result.not_forecast),
        ),
    )


_range = units.seconds_range


def _measured_choice(cpu: RunRecord, acc: RunRecord, acc_name: str) -> Recommendation:
    """The choice from a CPU run and an accelerator run: each cell at its measured time, the JAX cells that ran
    faster on the CPU pinned there."""
    sources = sources_of(cpu, acc)  # the accelerator run's code where both carry a cell
    from nbscope.analyse.diagnose._source import analyse

    acc_cells, cpu_cells = acc.notebook_run().cells, cpu.notebook_run().cells
    index_of = {c.source_hash: c.index for c in acc_cells}
    code = analyse({index_of[h]: s for h, s in sources.items() if h in index_of})
    pairs = pair_cells(acc_cells, cpu_cells, sources=sources)
    cpu_total = sum(c.wall_s or 0.0 for c in cpu_cells)
    acc_total = sum(c.wall_s or 0.0 for c in acc_cells)
    pinned, faster_on_acc, saved = _pin_cells(pairs, code, acc_name, acc.notebook_run().runtime_start)
    mixed = acc_total - saved
    estimates = (
        Estimate("cpu", round(cpu_total, 4)),
        Estimate(acc_name, round(acc_total, 4)),
        Estimate("mixed", round(mixed, 4) if pinned else None),
    )
    best_single = "cpu" if cpu_total <= acc_total else acc_name
    choice = "mixed" if pinned and mixed < min(cpu_total, acc_total) * (1 - MIXED_MIN_GAIN) else best_single
    reason = _measured_reason(choice, pinned, acc_name, cpu_total, acc_total, mixed)
    caveats = [
        "estimates add measured cell times (kernel start excluded); pinning moves a function's inputs between "
        "devices, which these runs did not measure"
    ]
    start = acc.notebook_run().runtime_start
    held = max(0.0, (start.wall_s or 0.0) - (start.compile_s or 0.0)) if start is not None else 0.0
    if start is not None and held >= PIN_MIN_GAIN_S:
        caveats.append(
            f"the {acc_name.upper()} runtime started in cell {start.index + 1} ({_s(held)} there beyond compile): "
            f"a kernel that touches the {acc_name.upper()} pays it once whatever is pinned, so no pin counts it "
            "as saved; pinning that cell moves it to the next one that uses the device"
        )
    cpu_host, acc_host = cpu.machine().cpu, acc.machine().cpu
    cpu_model, acc_model = cpu_host.model, acc_host.model
    same_host = cpu_model == acc_model and cpu_host.logical_cores == acc_host.logical_cores
    if not same_host:
        caveats.append(
            f"the runs come from different hosts ({cpu_model} vs {acc_model}): CPU-pinned figures are "
            "those of the CPU run's host"
        )
    return Recommendation(
        recommendation=choice,
        reason=reason,
        basis="measured",
        estimates=estimates,
        pinned=tuple(pinned),
        faster_on_accelerator=tuple(sorted(faster_on_acc, key=lambda p: -p.saving_s)[:5]),
        accelerator=acc_name,
        same_host=same_host,
        caveats=tuple(caveats),
        runs={"cpu": RunTotal(cpu.run_id, round(cpu_total, 4)), acc_name: RunTotal(acc.run_id, round(acc_total, 4))},
    )


def _pin_cells(
    pairs: Sequence[CellPair[Cell]], code: NotebookCode, acc_name: str, start: Cell | None
) -> tuple[list[MeasuredPin], list[MeasuredPin], float]:
    """The paired cells (accelerator run, CPU run) worth pinning to the CPU (JAX work, and enough time
    saved), those faster on the accelerator, and the seconds pinning saves. ``start``: the accelerator run's
    cell that opened its runtime; its time beyond compile is not counted as saved (pinning moves the start to
    the next cell that touches the device), so what it saves is at least the figure given."""
    pinned: list[MeasuredPin] = []
    faster_on_acc: list[MeasuredPin] = []
    saved = 0.0
    for pair in pairs:
        if pair.a is None or pair.b is None:
            continue
        wa, wc = pair.a.wall_s, pair.b.wall_s
        if wa is None or wc is None:
            continue
        calls = code.calls_in(pair.a.index)
        functions = tuple(sorted(_jax_work(pair.a, calls, code.jitted) | _jax_work(pair.b, calls, code.jitted)))
        held = max(0.0, wa - (pair.a.compile_s or 0.0)) if start is not None and pair.a.index == start.index else None
        gain = wa - (held or 0.0) - wc
        # Only cells with JAX work can be pinned; a NumPy cell runs on the host CPU either way.
        worth_pinning = bool(functions) and gain >= PIN_MIN_GAIN_S and (wc <= 0 or wa / wc >= PIN_MIN_RATIO)
        if not worth_pinning and wc - wa < PIN_MIN_GAIN_S:
            continue
        entry = MeasuredPin(
            cell=pair.a.index,
            line=pair.a.line,
            first_line=pair.a.first_line,
            functions=functions,
            cpu_s=round(wc, 4),
            accelerator=acc_name,
            accelerator_s=round(wa, 4),
            saving_s=round(gain if worth_pinning else wc - wa, 4),
            runtime_start_s=round(held, 4) if held is not None and worth_pinning else None,
        )
        if worth_pinning:
            pinned.append(entry)
            saved += gain
        else:
            faster_on_acc.append(entry)
    return pinned, faster_on_acc, saved


def _measured_reason(
    choice: str, pinned: list[MeasuredPin], acc_name: str, cpu_total: float, acc_total: float, mixed: float
) -> str:
    pinned_names = sorted({n for p in pinned for n in p.functions})
    if choice == "mixed":
        return (
            f"{acc_name.upper()} with {', '.join(pinned_names) or 'the listed cells'} pinned to the CPU: "
            f"{_s(mixed)} vs {_s(cpu_total)} on CPU and {_s(acc_total)} on {acc_name.upper()}"
        )
    if choice == "cpu":
        worst = max(pinned, key=lambda p: p.saving_s, default=None)
        return f"CPU {_s(cpu_total)} vs {acc_name.upper()} {_s(acc_total)}" + (
            f"; the {acc_name.upper()} loses most in cell {worst.cell + 1} ({', '.join(worst.functions)}: "
            f"{_s(worst.accelerator_s)} vs {_s(worst.cpu_s)})"
            if worst
            else ""
        )
    return f"{acc_name.upper()} {_s(acc_total)} vs CPU {_s(cpu_total)}"


def _forecast_pinned_and_gains(
    notebook: NotebookForecast, cells: Mapping[int, CellForecast]
) -> tuple[tuple[ForecastPin, ...], tuple[ForecastGain, ...]]:
    """The functions the forecast keeps on the CPU (with the code change), and the largest GPU gains."""
    pinned = []
    for kept in notebook.keep_on_cpu:
        first = cells[kept.cells[0]] if kept.cells else None  # a kept function's cells are the forecast's
        pinned.append(
            ForecastPin(
                cell=kept.cells[0] if kept.cells else None,
                cells=kept.cells,
                line=first.line if first is not None else None,
                first_line=first.first_line if first is not None else None,
                functions=(kept.function,),
                cpu_s=round(kept.cpu_s, 4),
                gpu_low_s=round(kept.gpu_low_s, 4),
                gpu_high_s=None if kept.gpu_high_s is None else round(kept.gpu_high_s, 4),
                saving_s=round(kept.slower_by_s, 4),
                change=kept.change.text,
                example=kept.change.example,
            )
        )
    gains = tuple(
        ForecastGain(
            functions=(e.function,),
            cells=e.cells,
            cell=e.cells[0] if e.cells else None,
            cpu_s=round(e.cpu_s, 4),
            gpu_low_s=round(e.gpu_low_s, 4),
            gpu_high_s=None if e.gpu_high_s is None else round(e.gpu_high_s, 4),
            saving_s=round(e.faster_by_s, 4),
        )
        for e in notebook.gains[:5]
    )
    return tuple(pinned), gains


def _forecast_reason(
    record: RunRecord, device: Device, choice: str, notebook: NotebookForecast, raising: Sequence[str] = ()
) -> str:
    plan = notebook.plan
    kind = device.kind  # GPU or TPU
    gpu_range = _range(notebook.low_s, notebook.high_s)
    kept = ", ".join(e.function for e in notebook.keep_on_cpu)
    where = f"CPU run {record.run_id}" if record.run_id is not None else "the CPU run"
    head = f"forecast for the {device.name} from {where} (no {kind} run)"
    if notebook.verdict == "fails":
        cells = ", ".join(str(i + 1) for i in notebook.failing)
        functions = ", ".join(raising)
        return (
            f"{head}: fails on the {kind}, cell{'s' if len(notebook.failing) > 1 else ''} {cells} raise there; "
            f"the CPU ran it in {_s(notebook.cpu_s)}"
            + (f"; on a {kind}, keep {functions} on the CPU" if functions else "")
        )
    if choice == "mixed" and plan is not None:
        return (
            f"{head}: {kind} with {kept} kept on the CPU, {_range(plan.low_s, plan.high_s)}, vs "
            f"{_s(notebook.cpu_s)} measured on the CPU and {gpu_range} with everything on the {kind}"
        )
    if choice == device.platform:
        return f"{head}: {gpu_range} on the {kind} vs {_s(notebook.cpu_s)} measured on the CPU"
    if notebook.verdict != "slower" and notebook.high_s is None and notebook.unbounded:
        cells = ", ".join(str(i + 1) for i in notebook.unbounded)
        return (
            f"{head}: not known on the {kind}, {gpu_range} vs {_s(notebook.cpu_s)} measured on the CPU: the {kind} "
            f"time of cell{'s' if len(notebook.unbounded) > 1 else ''} {cells} has no upper bound; the CPU "
            "is what was measured" + (f"; on a {kind}, keep {kept} on the CPU" if kept else "")
        )
    why = "slower" if notebook.verdict == "slower" else "no faster"
    reason = f"{head}: {why} on the {kind}, {gpu_range} vs {_s(notebook.cpu_s)} measured on the CPU"
    return reason + (f"; on a {kind}, keep {kept} on the CPU" if kept else "")
