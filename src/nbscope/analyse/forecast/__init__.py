"""``nbscope forecast``: what a notebook profiled on a CPU will do on a named GPU, per cell, and why.

Reads a profile run recorded with program data (``nbscope profile --forecast GPU`` or ``--programs``)
and returns a :class:`Forecast` (frozen; ``to_dict()`` is the ``--json`` document); ``nbscope.render.forecast``
formats it. Per cell and GPU:

* **host** work (Python, NumPy, Numba and everything outside JAX's compiled programs) is carried over as
  measured on the CPU: a GPU does not change it;
* **compile**: JAX's trace, lowering and backend compile, carried over as measured on this CPU and
  marked *not forecast* (XLA:GPU compiles differently);
* each **program execution** (counted in the cell's trace) is forecast from its HLO by
  :mod:`nbscope.analyse.forecast.model`: loops, work, launches, dispatch; plus host↔device **transfers**.

Each figure is a low–high range carried from the device table's ranges. The cell's **verdict** compares
the range with the cell's measured time (10 % margin): ``faster``, ``slower``, ``similar`` or
``unchanged`` (no JAX work). The notebook's verdict adds the plan that a GPU would need: which jitted
functions to keep on the CPU (their GPU time exceeds their measured CPU time), with the code change.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from nbscope import _units as units
from nbscope._errors import NbscopeError
from nbscope.analyse.forecast import accelerator
from nbscope.analyse.forecast import placement as placement_module
from nbscope.analyse.forecast.devices import Device, DeviceTable, Figure, load_table, resolve
from nbscope.analyse.forecast.jax_code import cells_touching_jax
from nbscope.analyse.forecast.model import (
    Basis,
    Calls,
    ClassCompile,
    CompileFigures,
    CpuRates,
    Term,
    Unattributed,
    observed_loops,
    program_terms,
    transfer_term,
)
from nbscope.analyse.forecast.placement import PlacementSummary
from nbscope.analyse.forecastable import RECORDED_BY, runs_jax
from nbscope.record.cells import FAILURE_WORDS, failure_text
from nbscope.record.run import platform_of
from nbscope.record.sources import load_sources, naming
from nbscope.schema.codec import Encoded, Write, given, known, never
from nbscope.schema.model import Cell, NotebookRun
from nbscope.schema.programs import CellPrograms, Execution, ProgramData, TraceWindow

if TYPE_CHECKING:
    from nbscope.analyse.forecast.measured import MeasuredComparison
    from nbscope.record.run import RunRecord

__all__ = [
    "CellForecast",
    "CellTimes",
    "CellVerdict",
    "CodeChange",
    "CpuRates",
    "Forecast",
    "GainedFunction",
    "KeptFunction",
    "NotForecast",
    "NotebookForecast",
    "NotebookVerdict",
    "Outcome",
    "Plan",
    "ProgramRun",
    "RunInfo",
    "Term",
    "Uncertainty",
    "check_record",
    "cpu_rates",
    "forecast",
    "not_forecast",
    "raising_functions",
]

FORECAST_VERSION = 1
MARGIN = 0.10  # a forecast within ±10 % of the measured time is "similar"
UNCERTAIN_RATIO = 4.0  # a dominant term wider than this (high / low) leaves the cell "uncertain"
# A jitted call's own time on the host beyond its program's (JAX's dispatch: 4 µs for a small jitted call, tens of
# µs for an eager operation), at most: time after a trace's cut beyond this per counted call is not theirs.
CALL_AFTER_CUT_S = 0.001
MEAN_PROGRAMS = 5  # a class's mean compile per program bounds its compile from this many programs on
SMALL_UNATTRIBUTED_S = 0.05  # unattributed JAX time below this or 10 % of the cell (after a cut: this) is carried over
MATERIAL_S = 0.05  # a function's GPU/CPU difference below this is not worth a code change
CPU_DEVICE = 'jax.devices("cpu")[0]'
# A cell's verdict on a GPU against its CPU time ("unchanged": no JAX work); a notebook's may also be "mixed".
CellVerdict = Literal["faster", "slower", "similar", "uncertain", "unchanged", "fails"]
NotebookVerdict = CellVerdict | Literal["mixed"]


@dataclass(frozen=True, slots=True)
class _Cell:
    cell: Cell
    wall: float
    compile_s: float
    host_s: float
    executions: tuple[Execution, ...]
    unattributed_s: float = 0.0  # JAX time the trace did not attribute to a known program
    unseen: bool = False  # the trace was cut before any program of the cell was seen: JAX or host, unknown
    jax_work: bool = False  # the cell ran JAX work (what ran says so, or its code may and nothing says not)
    after_cut_s: float = 0.0  # of ``unattributed_s``: time after a cut that no measured call rate accounts for
    ran_on_s: float = 0.0  # of ``unattributed_s``: programs an earlier cell dispatched, waited for as this one started
    # programs an earlier cell dispatched and counted, which ran on into this one: forecast there, counted once
    counted_there_s: float = 0.0
    copies_s: float = 0.0  # host↔device copies on this CPU (the forecast's transfer term replaces them)


# ---- the result ------------------------------------------------------------------------------------
# ``Forecast.to_dict()`` (the codec's encoding) is the ``nbscope forecast --json`` document.


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The CPU run a forecast was made from."""

    id: int | None
    target: str
    started_at: str
    digest: str | None
    cpu: str | None  # the CPU's model


@dataclass(frozen=True, slots=True)
class CellTimes:
    """A cell's time measured on the CPU, split as the forecast reads it."""

    wall_s: float
    compile_s: float  # JAX's compile
    host_s: float  # Python, NumPy, Numba: carried over as measured
    jax_s: float  # the rest: JAX programs, transfers and unattributed JAX time


@dataclass(frozen=True, slots=True)
class ProgramRun:
    """One compiled program a cell executed on the CPU: how often and for how long."""

    program: str
    function: str | None  # None: not in the run's program table
    kind: str | None
    count: int
    count_basis: str | None
    cpu_s: float | None


@dataclass(frozen=True, slots=True)
class Uncertainty:
    """Why a cell's verdict is "uncertain": what is unknown and what would settle it."""

    unknown: str
    settle: str
    dominant_ratio: float | None  # the dominant term's high / low (None: no upper bound)
    straddles: bool  # the range straddles the CPU time


@dataclass(frozen=True, slots=True)
class Failing:
    """An operation of the cell the device cannot run, the function that calls it, the device's error and where
    that is known from: the fix is to keep that function on the CPU."""

    operation: str
    function: str
    reason: str
    source: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """One cell on one GPU: its forecast range, verdict and terms (largest first)."""

    low_s: float
    high_s: float | None  # None: no upper bound
    cpu_s: float  # the cell's time measured on the CPU
    verdict: CellVerdict
    uncertain: Uncertainty | None
    dominant: Term | None
    jax_dominant: Term | None  # the largest term that is neither host work nor compile
    terms: tuple[Term, ...]
    missing_programs: tuple[str, ...]  # programs the cell ran that the run's table lacks
    # operations the device cannot run: the cell raises there (verdict "fails")
    fails: Annotated[tuple[Failing, ...], Write(when=given)] = ()

    def change(self) -> float:
        """The forecast's change of the cell's time (seconds, + slower): its range's midpoint minus the CPU
        time; an open range counts from its low end."""
        low, high = self.low_s, self.high_s
        middle = low if high is None else (low * high) ** 0.5 if low > 0 else (low + high) / 2
        return middle - self.cpu_s


@dataclass(frozen=True, slots=True)
class CellForecast:
    """One cell that ran: its CPU times, the programs it executed, and its outcome per GPU key."""

    index: int
    source_hash: str
    line: int | None
    first_line: str
    status: str
    cpu: CellTimes
    programs: tuple[ProgramRun, ...]
    trace: str | None  # "read", or why the cell has no trace
    gpu: Mapping[str, Outcome]
    recorded: Annotated[Cell, Write(when=never)] = field(
        compare=False, repr=False
    )  # the run's own cell (not in the document)


@dataclass(frozen=True, slots=True)
class NotForecast:
    """A cell that raised, died or timed out: what ran is not the cell, so it is not forecast."""

    index: int
    line: int | None
    first_line: str
    status: str
    cpu_s: float | None
    reason: str  # "not forecast: the cell raised (ValueError: …)"


@dataclass(frozen=True, slots=True)
class CodeChange:
    """The change that keeps a function on the CPU, and a line of the notebook rewritten that way."""

    text: str
    example: str | None


@dataclass(frozen=True, slots=True)
class KeptFunction:
    """A jitted function to keep on the CPU: its forecast GPU time exceeds its CPU time measured in the trace."""

    function: str
    gpu_low_s: float
    gpu_high_s: float | None
    cpu_s: float
    cells: tuple[int, ...]
    kind: str | None  # user, library, …
    slower_by_s: float
    change: CodeChange
    programs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GainedFunction:
    """A jitted function the GPU makes faster by a material amount."""

    function: str
    gpu_low_s: float
    gpu_high_s: float
    cpu_s: float
    cells: tuple[int, ...]
    kind: str | None
    faster_by_s: float
    programs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Plan(Encoded):  # audit writes a notebook's plan
    """The notebook on the GPU with the functions to keep on the CPU kept there."""

    keep_on_cpu: tuple[str, ...]
    low_s: float
    high_s: float | None


@dataclass(frozen=True, slots=True)
class NotebookForecast:
    """The notebook on one GPU: totals, verdicts, the plan and the cells ranked by forecast change."""

    cpu_s: float
    low_s: float
    high_s: float | None
    all_on_gpu: CellVerdict  # the verdict with everything on the GPU ("unchanged": the notebook runs no JAX)
    verdict: NotebookVerdict  # all_on_gpu, or "mixed" when keeping some functions on the CPU beats both
    keep_on_cpu: tuple[KeptFunction, ...]
    gains: tuple[GainedFunction, ...]
    plan: Plan | None
    ranking: tuple[int, ...]  # cell indices, largest change first
    uncertain: tuple[int, ...]
    most_slower: int | None
    most_faster: int | None
    not_forecast: tuple[int, ...]
    unbounded: tuple[int, ...] = ()  # the JAX cells whose GPU time has no upper bound (why ``high_s`` is None)
    failing: Annotated[tuple[int, ...], Write(when=given)] = ()  # cells that raise on the device: verdict "fails"

    @property
    def document_keys(self) -> tuple[str, ...]:
        # A notebook without JAX has always listed its (empty) plan and ranking before its gains.
        middle = ("plan", "ranking", "gains") if self.all_on_gpu == "unchanged" else ("gains", "plan", "ranking")
        return (
            "cpu_s",
            "low_s",
            "high_s",
            "all_on_gpu",
            "verdict",
            "keep_on_cpu",
            *middle,
            "uncertain",
            "most_slower",
            "most_faster",
            "not_forecast",
            "unbounded",
            *(("failing",) if self.failing else ()),
        )


@dataclass(frozen=True, slots=True)
class Forecast(Encoded):
    """The forecast of a profile run on each named GPU (see the module docstring), as ``forecast`` returns it."""

    version: int
    run: RunInfo
    has_jax: bool
    devices: tuple[Device, ...]  # in the order asked
    model: Mapping[str, Figure]  # the model figures every device shares
    device_files: tuple[str, ...]
    cells: tuple[CellForecast, ...]  # the cells that ran and did not fail, in notebook order
    not_forecast: tuple[NotForecast, ...]
    cpu_rates: CpuRates | None
    placement: PlacementSummary
    notebook: Mapping[str, NotebookForecast]  # by device key
    notes: tuple[str, ...]
    # With ``nbscope forecast --measured``: the forecast against a GPU run, per device (None: not asked).
    measured: Annotated[tuple[MeasuredComparison, ...] | None, Write(when=known)] = None

    def device(self, key: str) -> Device | None:
        return next((d for d in self.devices if d.key == key), None)

    def device_name(self, key: str) -> str:
        """The GPU's name (``NVIDIA T4``), or the key when the forecast has no such device."""
        device = self.device(key)
        return device.name if device is not None else key

    def cell(self, index: int) -> CellForecast | None:
        return next((c for c in self.cells if c.index == index), None)

    def with_measured(self, comparisons: tuple[MeasuredComparison, ...]) -> Forecast:
        return replace(self, measured=comparisons)


def check_record(record: RunRecord, run_label: str, run: NotebookRun | None = None) -> None:
    """Refuse a run the forecast cannot read, with the command that records what it needs (``run``: the
    record's typed run, when the caller has it)."""
    if record.kind not in ("profile", "trace"):
        raise NbscopeError(f"{run_label} is a {record.kind} run: forecast reads a notebook profile ({RECORDED_BY})")
    if (platform := platform_of(record)) not in (None, "cpu"):  # its times are the device's, not a CPU's
        raise NbscopeError(
            f"{run_label} ran on the {platform.upper()}: forecast reads a run on the CPU; give a CPU run of the "
            f"notebook, or compare one with this run (nbscope compare CPU_RUN {run_label.removeprefix('run ')})"
        )
    run = run or record.notebook_run()
    if runs_jax(run) and run.program_data is None:
        raise NbscopeError(
            f"{run_label} was recorded without program data, which the forecast needs: profile the notebook "
            f"with `{RECORDED_BY}` (or `--programs`)"
        )


def forecast(
    record: RunRecord,
    gpus: str | list[str],
    *,
    table: DeviceTable | None = None,
    devices_file: str | Path | None = None,
    notebook_path: str | Path | None = None,
    run_label: str | None = None,
    sources: Mapping[str, str] | None = None,
    target: accelerator.Compiled | None = None,
) -> Forecast:
    """The forecast of a profile run on each named GPU (see the module docstring for its parts).

    The cell sources (for placement and the exact code changes) are the code the record carries; for cells an
    older record does not carry, ``sources`` (by source hash) or ``notebook_path`` names the notebook's code
    (:func:`nbscope.record.sources.naming`), else the notebook the run recorded is read."""
    label = run_label or (f"run {record.run_id}" if record.run_id is not None else "the run")
    table = table or load_table(devices_file)
    devices = resolve(table, gpus)
    run = record.notebook_run()
    check_record(record, label, run)
    data = run.program_data
    record = naming(naming(record, sources), notebook_path)
    code = _notebook_sources(record, run)
    ran = list(forecastable_cells(run, code).values())
    failed = tuple(f for f in (not_forecast(c) for c in run.cells) if f is not None)
    rates = cpu_rates(ran, run)
    placement = placement_module.read(code)
    cell_lines = {c.index: c.line for c in run.cells}
    has_jax = runs_jax(run)
    notes = _notes(data, placement, cell_lines, has_jax) + accelerator.target_notes(target)
    first_jax = next((c.cell.index for c in ran if c.jax_work), None)
    cells = tuple(
        _cell_entry(
            cell,
            run,
            {
                device.key: _cell_forecast(
                    cell,
                    run,
                    device,
                    table,
                    rates,
                    _pins(cell, run, placement, cell_lines),
                    first_jax=cell.cell.index == first_jax,
                    target=target,
                )
                for device in devices
            },
        )
        for cell in ran
    )
    failed_indices = tuple(f.index for f in failed)
    return Forecast(
        version=FORECAST_VERSION,
        run=RunInfo(
            id=record.run_id,
            target=record.target,
            started_at=record.started_at,
            digest=record.digest,
            cpu=record.machine().cpu.model,
        ),
        has_jax=has_jax,
        devices=tuple(devices),
        model=dict(table.model),
        device_files=tuple(table.files),
        cells=cells,
        not_forecast=failed,
        cpu_rates=rates,
        placement=placement.summary(cell_lines),
        notebook={device.key: _notebook(cells, device, code, has_jax, failed_indices) for device in devices},
        notes=tuple(notes),
    )


# ---- cells ---------------------------------------------------------------------------------------


def _notes(
    data: ProgramData | None, placement: placement_module.Placement, cell_lines: dict[int, int | None], has_jax: bool
) -> list[str]:
    """What the forecast says of the whole notebook: the program data's notes, a pin to the CPU, no JAX at all."""
    notes = list(data.notes) if data is not None else []
    if placement.platform is not None:
        notes.append(
            f"the notebook pins JAX to the CPU at {placement.platform.where(cell_lines)} "
            f"(`{placement.platform.text}`): from there on it runs on the CPU whatever GPU the machine has, "
            "so those calls are forecast as measured"
        )
    if not has_jax:
        notes.append(
            "this notebook runs no JAX: NumPy, Numba and Python run on the CPU whatever GPU the machine has, "
            "so the forecast is its host work as measured"
        )
    return notes


def forecastable_cells(run: NotebookRun, sources: Mapping[int, str] | None = None) -> dict[int, _Cell]:
    """The run's cells that ran and did not fail, by index, their time split as the forecast reads it
    (``sources``: the code by cell index, which decides a cell whose trace was cut before it showed
    anything; without it every such cell may have run JAX)."""
    jax_code = cells_touching_jax(sources) if sources is not None else set()
    measured = (_measured(c, sources is None or c.index in jax_code or c.index not in sources) for c in run.cells)
    return {c.cell.index: c for c in measured if c is not None}


def _within(executions: tuple[Execution, ...], budget: float) -> tuple[Execution, ...]:
    """The executions with their CPU times scaled down together so that they add up to ``budget`` at most:
    a sampled or extrapolated figure is an estimate, and no program ran longer than the cell did."""
    total = sum(e.cpu_s or 0.0 for e in executions)
    if total <= budget or total <= 0:
        return executions
    factor = budget / total
    return tuple(
        replace(
            e,
            cpu_s=None if e.cpu_s is None else e.cpu_s * factor,
            loops={
                key: replace(seen, cpu_s=None if seen.cpu_s is None else seen.cpu_s * factor)
                for key, seen in e.loops.items()
            },
        )
        for e in executions
    )


def _measured(cell: Cell, code_may_run_jax: bool = True) -> _Cell | None:
    """The cell's measured time split as the forecast reads it. ``code_may_run_jax``: whether the cell's code
    refers to JAX (:func:`~nbscope.analyse.forecast.jax_code.cells_touching_jax`), what decides a cell whose
    trace was cut before it showed anything."""
    wall = cell.notebook_wall_s  # nbscope's own collection is no part of the notebook
    # A cell that raised, died, timed out or was interrupted is not forecast (:func:`not_forecast`).
    if wall is None or cell.status in ("not-run", "skipped", *FAILURE_WORDS):
        return None
    # The probe waited, as the cell started, for programs an earlier cell dispatched (``in_flight_wait_s``, in
    # the cell's time). A cell whose code cannot use their results would have run beside them: that wait is
    # nbscope's, not the cell's. Otherwise it is JAX time that no trace of this cell saw.
    waited = cell.in_flight_wait_s if code_may_run_jax else 0.0
    if not code_may_run_jax:
        wall = max(0.0, wall - cell.in_flight_wait_s)
    compile_s = min(cell.jax.compile_s if cell.jax is not None else 0.0, wall)  # JAX's; Numba's is host work here
    data = cell.programs
    rest = max(0.0, wall - compile_s)
    executions = _within(data.executions if data is not None else (), rest)
    # A trace cut short was extrapolated to the whole cell when it was read; sampled figures were scaled.
    busy = data.cpu_busy_s if data is not None else None
    if busy is None:
        busy = sum(e.cpu_s or 0.0 for e in executions)
    busy = min(busy, rest)
    xla = data.xla_busy_s if data is not None else None
    unattributed = max(0.0, min(xla, rest) - busy) if xla is not None else 0.0
    transfers = data.transfers if data is not None else None
    copies = (transfers.cpu_s or 0.0) if transfers is not None else 0.0  # replaced by the forecast's own transfer term
    copies = min(copies, max(0.0, rest - busy))
    unattributed = min(unattributed, max(0.0, rest - busy - copies))
    counted = data is not None and bool(data.counted)
    if counted:  # every program that ran is known: XLA's work no thunk of theirs claimed is still theirs
        busy, unattributed = busy + unattributed, 0.0
    ran_on = min(waited, max(0.0, rest - busy - copies - unattributed))
    # The probe counted every execution where it dispatched (``counted``): the earlier cell forecasts these
    # programs, so their time here is counted there once (hopenhayn's ``p_star`` cell: 1.06 s of the 200
    # ``update_cross_section`` calls its %%time cell dispatched, before "GPU time unknown" and no upper bound).
    counted_there = ran_on if counted else 0.0
    unattributed += ran_on - counted_there
    window = data.window if data is not None and data.window is not None and data.window.cut else None
    # The probe counted every execution (``counted``): the programs that ran are known, a cut trace or not.
    ran_jax = bool(executions) or compile_s > 0 or unattributed > 0 or copies > 0
    # The session cut while one program ran on the cell's own thread (a program's events come when it ends:
    # jnp.cos over 50 M values) saw no program: none of the cell's time is known to be host work, unless the
    # cell's code cannot run JAX at all (a plot, a Numba loop) and nothing else it did was JAX's: then all of it is.
    unseen = window is not None and not executions and (code_may_run_jax or ran_jax) and not counted
    if counted and not executions and compile_s <= 0:
        ran_jax = False  # no execution counted and nothing compiled: the cell runs no JAX, whatever its trace did
    if unseen:
        unattributed = max(unattributed, rest - copies)
    host = max(0.0, rest - busy - unattributed - copies - counted_there)
    after_cut = 0.0
    if window is not None and executions and window.traced_s is not None:
        host, after_cut = _split_after_cut(
            cell, window, data, wall, rest, compile_s, (host, busy, unattributed, copies)
        )
        unattributed += after_cut
    host = min(host, _host_bound(cell, executions, compile_s))
    return _Cell(
        cell=cell,
        wall=wall,
        compile_s=compile_s,
        host_s=host,
        executions=executions,
        unattributed_s=unattributed,
        unseen=unseen,
        jax_work=ran_jax or unseen,
        after_cut_s=after_cut,
        copies_s=copies,
        ran_on_s=ran_on - counted_there,
        counted_there_s=counted_there,
    )


def _host_bound(cell: Cell, executions: tuple[Execution, ...], compile_s: float) -> float:
    """The most of a cell's time that can be host work: Python, NumPy and Numba run on the cell's own thread,
    so in a cell that ran JAX programs they had no more than that thread's time on a CPU and waiting for one
    (``sched``), less JAX's compile and nbscope's collection (on that thread too). The rest it spent blocked, waiting for XLA (its thread
    pool, a loop's body, LAPACK): the programs' time, forecast from their HLO (opt_savings_2's OPI solver called from a Python loop: 78 of its 93.5 s were
    carried over as host work before)."""
    sched = cell.sched
    if not executions or sched is None or sched.on_cpu_s is None:
        return math.inf
    own = (cell.wall_s or 0.0) - (
        cell.notebook_wall_s or cell.wall_s or 0.0
    )  # nbscope's, on that thread (a trace's split)
    return max(0.0, sched.on_cpu_s + (sched.wait_s or 0.0) - compile_s - own)


def _split_after_cut(
    cell: Cell,
    window: TraceWindow,
    data: CellPrograms | None,
    wall: float,
    rest: float,
    compile_s: float,
    parts: tuple[float, float, float, float],
) -> tuple[float, float]:
    """A cut cell's host work and the time after its trace's cut that is JAX's (``parts``: host, busy, unattributed
    and copies as the trace saw them)."""
    host, busy, unattributed, copies = parts
    counted = data is not None and bool(data.counted)
    # Only the traced window shows host work (and Numba's compile, timed apart, is host work wherever it
    # fell). After the cut, a steady stream of calls (the trace measured its rate) went on: as much time
    # as the window's calls took, times the scale, is theirs, forecast with their extrapolated counts.
    # What ran after the cut beyond that (NumPyro's sampler after a window of its setup's small calls),
    # or all of it without such a rate, is not known: JAX time the trace did not attribute, its GPU time
    # unknown unless it is small. Never host, and never dropped.
    scale = max(1.0, window.scale or 1.0)
    traced = min(window.traced_s or 0.0, wall)  # the caller has checked it is known
    compiled_before = min(compile_s, traced if window.compile_s is None else window.compile_s, traced)
    if counted:  # the programs' figures are the window's own (counts scale their executions, not these)
        seen_host = traced - compiled_before - busy - unattributed - copies / scale
    else:
        seen_host = traced - compiled_before - (busy + unattributed + copies) / scale
    numba_s = cell.numba.compile_s if cell.numba is not None else 0.0
    known = min(host, max(0.0, seen_host, numba_s))
    if counted:
        # After the cut ran the counted executions, each forecast from its program at its count. Where programs
        # ran again after the cut and each has a CPU time (the window's per execution, times its count:
        # collect.program), what they took beyond the window's is theirs, and so is up to CALL_AFTER_CUT_S of
        # the rest per call (JAX's dispatch of each); what is left is the cell's host work (SciPy's root finder
        # between a few Jacobians of a 5,000-dimensional system: 132 of its 139 s). Where none ran again (the
        # time after the cut is a program's that ran on, a 500-step loop over 500,000 firms), or one has no CPU
        # time, the time is theirs.
        executions = data.executions if data is not None else ()
        calls_after = sum(max(0, (e.count or 0) - (e.traced_count or 0)) for e in executions)
        if not calls_after or any(e.count and e.cpu_s is None for e in executions):
            return known, 0.0
        after = max(0.0, rest - max(0.0, traced - compiled_before))
        jax_after = max(0.0, sum(e.cpu_s or 0.0 for e in executions) - busy) + calls_after * CALL_AFTER_CUT_S
        return min(host, known + max(0.0, after - jax_after)), 0.0
    if data is not None and data.call_rate is None:
        after_cut = host - known
    else:
        after_cut = min(host - known, max(0.0, rest - scale * (traced - compiled_before)))
    return known, after_cut


def not_forecast(cell: Cell) -> NotForecast | None:
    """A cell that raised, died or timed out: what ran is not the cell, so it is not forecast."""
    what = failure_text(cell)
    if what is None:
        return None
    return NotForecast(
        index=cell.index,
        line=cell.line,
        first_line=cell.first_line,
        status=cell.status,
        cpu_s=cell.notebook_wall_s,
        reason=f"not forecast: the cell {what}",
    )


def _cell_entry(cell: _Cell, run: NotebookRun, outcomes: Mapping[str, Outcome]) -> CellForecast:
    recorded = cell.cell

    def program(execution: Execution) -> ProgramRun:
        known = run.program(execution.program)
        return ProgramRun(
            program=execution.program,
            function=known.function if known else None,
            kind=known.kind if known else None,
            count=execution.runs,
            count_basis=execution.count_basis,
            cpu_s=execution.cpu_s,
        )

    return CellForecast(
        index=recorded.index,
        source_hash=recorded.source_hash,
        line=recorded.line,
        first_line=recorded.first_line,
        status=recorded.status,
        cpu=CellTimes(
            wall_s=cell.wall,
            compile_s=cell.compile_s,
            host_s=cell.host_s,
            jax_s=max(0.0, cell.wall - cell.compile_s - cell.host_s),
        ),
        programs=tuple(program(e) for e in cell.executions),
        trace=recorded.programs.trace if recorded.programs is not None else None,
        gpu=dict(outcomes),
        recorded=recorded,
    )


@dataclass(slots=True)
class _BestRate:
    """The best rate (flops/s or bytes/s) found so far, and the jitted function it came from."""

    per_s: float | None = None
    function: str | None = None


def cpu_rates(cells: list[_Cell], run: NotebookRun) -> CpuRates | None:
    """This CPU's achieved flops/s and bytes/s, measured in the run itself: the best over executions of
    at least 1 ms of loop-free programs (whose time is their work, not a loop's bookkeeping). What a
    trip-count estimate divides by; None when the run has no such execution."""
    flops_rate, bytes_rate = _BestRate(), _BestRate()
    first: _BestRate | None = None  # the rate the run found first, which the document lists first
    for cell in cells:
        for execution in cell.executions:
            program = run.program(execution.program)
            count, cpu = execution.runs, execution.cpu_s
            if (
                program is None
                or not program.per_execution.complete
                or program.loops
                or cpu is None
                or not count
                or cpu / count < 1e-3
            ):
                continue
            work = program.per_execution
            each = cpu / count
            flops = (work.flops or 0.0) + (work.transcendentals or 0.0)
            for best, amount in ((flops_rate, flops), (bytes_rate, work.bytes or 0.0)):
                if amount > 0 and amount / each > (best.per_s or 0.0):
                    best.per_s, best.function = amount / each, program.function
                    first = first or best
    if first is None:
        return None
    return CpuRates(
        flops_per_s=flops_rate.per_s,
        flops_from=flops_rate.function,
        bytes_per_s=bytes_rate.per_s,
        bytes_from=bytes_rate.function,
        bytes_first=first is bytes_rate,
    )


def _pins(
    cell: _Cell, run: NotebookRun, placement: placement_module.Placement, cell_lines: dict[int, int | None]
) -> dict[str, str]:
    """Per program the cell ran: why it runs on the CPU even on a GPU machine ("pinned to the CPU at
    line 12 (jax.jit(f, device=cpu))"); programs not pinned are absent. A ``default_device`` block whose
    calls name none of the cell's programs pins them all (its eager operations)."""
    index = cell.cell.index
    programs = {e.program: run.program(e.program) for e in cell.executions}
    functions = {key: program.function if program is not None else None for key, program in programs.items()}
    named = {name for names, _ in placement.pins_in(index) if names for name in names}
    blanket = [
        pin
        for names, pin in placement.pins_in(index)
        if names and pin.how == "default_device" and not (names & set(functions.values()))
    ]
    found = {}
    for key, function in functions.items():
        pin = placement.pin_of(index, function) or (blanket[0] if blanket and function not in named else None)
        if pin is not None:
            found[key] = f"pinned to the CPU at {pin.where(cell_lines)} ({pin.text})"
    return found


def _cell_forecast(
    cell: _Cell,
    run: NotebookRun,
    device: Device,
    table: DeviceTable,
    rates: CpuRates | None,
    pins: dict[str, str],
    *,
    first_jax: bool,
    target: accelerator.Compiled | None = None,
) -> Outcome:
    all_pinned = bool(cell.executions) and all(e.program in pins for e in cell.executions)
    terms = _measured_terms(cell, run, device, table, all_pinned, target)
    start = accelerator.runtime_start_term(device) if first_jax else None
    if start is not None:
        terms.append(start)
    missing = _program_terms(cell, run, device, table, rates, pins, terms)
    transfer = _transfer_term(cell, device, table, all_pinned)
    if transfer is not None:
        terms.append(transfer)
    low = sum(t.low_s for t in terms)
    highs = [t.high_s for t in terms]
    high = None if any(h is None for h in highs) else sum(h for h in highs if h is not None)
    dominant = _dominant(terms)
    jax_term = _dominant([t for t in terms if t.kind not in ("host", "compile")])
    jax_work = cell.jax_work
    verdict: CellVerdict = _verdict(cell.wall, low, high) if jax_work else "unchanged"
    uncertain = _uncertainty(dominant, cell.wall, low, high, terms=terms, device=device) if jax_work else None
    if uncertain is not None:
        verdict = "uncertain"
    fails = tuple(
        Failing(f.operation, function, f.reason, f.source)
        for f, function in accelerator.failures(cell.cell, run, device, target)
        if (_program_of(run, function) or "") not in pins
    )
    if fails:
        verdict = "fails"
    return Outcome(
        low_s=low,
        high_s=high,
        cpu_s=cell.wall,
        verdict=verdict,
        uncertain=uncertain,
        dominant=dominant,
        jax_dominant=jax_term,
        terms=tuple(sorted(terms, key=_weight, reverse=True)),
        missing_programs=tuple(missing),
        fails=fails,
    )


def _program_of(run: NotebookRun, function: str) -> str | None:
    """The key of a program of ``function`` in the run's table (what a pin names), if there is one."""
    programs = run.program_data.programs if run.program_data is not None else {}
    return next((key for key, program in programs.items() if program.function == function), None)


def _measured_terms(
    cell: _Cell,
    run: NotebookRun,
    device: Device,
    table: DeviceTable,
    all_pinned: bool,
    target: accelerator.Compiled | None = None,
) -> list[Term]:
    """The cell's host work, its compile and the JAX time no program took, as terms."""
    terms: list[Term] = []
    if cell.host_s > 0:
        terms.append(
            Term(
                kind="host",
                low_s=cell.host_s,
                high_s=cell.host_s,
                words=f"host work (Python, NumPy, Numba) carried over as measured: {units.seconds(cell.host_s)}",
            )
        )
    if cell.compile_s > 0 and all_pinned:
        terms.append(
            Term(
                kind="compile",
                low_s=cell.compile_s,
                high_s=cell.compile_s,
                words=f"JAX compile on the CPU as measured ({units.seconds(cell.compile_s)}): the calls are pinned there",
                figures=CompileFigures(cell.compile_s, "measured"),
            )
        )
    elif cell.compile_s > 0:
        measured = (
            accelerator.measured_compile_term(cell.cell, run, device, table, target)
            if target is not None and device.platform == "tpu"
            else None
        )
        terms.append(measured or accelerator.compile_term(cell.cell, cell.compile_s, run, device, table))
    if cell.unattributed_s > 0:
        terms.append(_unattributed_term(cell, device))
    if cell.counted_there_s > 0:
        terms.append(
            Term(
                kind="unattributed",
                low_s=0.0,
                high_s=0.0,
                words=f"JAX time of programs an earlier cell dispatched, which ran on into this one "
                f"({units.seconds(cell.counted_there_s)}): forecast in that cell, which counted them",
                figures=Unattributed(cell.counted_there_s, False),
            )
        )
    return terms


def _unattributed_term(cell: _Cell, device: Device) -> Term:
    """The cell's JAX time no program took: carried over where small, else of unknown device time."""
    # Time after a cut is whatever the cell did next (a sampler's whole run): small only in itself.
    small = cell.unattributed_s < (
        SMALL_UNATTRIBUTED_S
        if cell.after_cut_s > 0 or cell.ran_on_s > 0
        else max(SMALL_UNATTRIBUTED_S, 0.1 * cell.wall)
    )
    what = (
        "time a trace cut short did not attribute, a JAX program's or host work"
        if cell.unseen
        else "JAX time after the trace's cut, not attributed to a program"
        if cell.after_cut_s > cell.ran_on_s
        else (
            "JAX time of programs an earlier cell dispatched, which ran on into this one (block on their "
            "results at that cell's end to see them there)"
        )
        if cell.ran_on_s > 0
        else "JAX time the trace did not attribute to a program"
    )
    seconds = units.seconds(cell.unattributed_s)
    return Term(
        kind="unattributed",
        low_s=cell.unattributed_s if small else 0.0,
        high_s=cell.unattributed_s if small else None,
        words=(
            f"{what} ({seconds}), carried over as measured"
            if small
            else f"{what} ({seconds}): {device.kind} time unknown"
        ),
        figures=Unattributed(cell.unattributed_s, cell.unseen),
    )


def _program_terms(
    cell: _Cell,
    run: NotebookRun,
    device: Device,
    table: DeviceTable,
    rates: CpuRates | None,
    pins: dict[str, str],
    terms: list[Term],
) -> list[str]:
    """The terms of each program the cell ran, added to ``terms`` (a pinned one's calls as measured on the CPU);
    the programs the run's table lacks."""
    missing = []
    for execution in cell.executions:
        program = run.program(execution.program)
        if program is None:
            missing.append(execution.program)
            continue
        count = execution.runs
        if execution.program in pins:
            cpu = execution.cpu_s or 0.0
            terms.append(
                Term(
                    kind="cpu",
                    low_s=cpu,
                    high_s=cpu,
                    program=execution.program,
                    function=program.function,
                    words=(
                        f"`{program.function}` {pins[execution.program]}: "
                        f"{count:,} call{'s' if count != 1 else ''} as measured"
                    ),
                    called=Calls(count, pinned=pins[execution.program]),
                )
            )
            continue
        cpu_each, observed = observed_loops(execution)
        for term in program_terms(program, device, table.model, cpu_each, observed, rates):
            scaled = term.scaled(count)
            called = Calls(count)
            words = scaled.words
            if execution.count_basis == "extrapolated":
                # The traced part ran slower than the rest (the profiler's cost per call), so its rate is low.
                called = Calls(count, calls_basis="extrapolated")
                words = (
                    f"≈{count:,} calls, likely more (extrapolated from a trace cut short, whose calls "
                    f"the profiler slowed) × {term.words}"
                )
            elif count > 1:
                words = f"{count:,} calls × {term.words}"
            if term.kind == "dispatch":
                scaled, words = _dispatch_by_waits(scaled, words, count, execution.synced, device)
            terms.append(replace(scaled, words=words, called=called))
    return missing


def _dispatch_by_waits(term: Term, words: str, count: int, synced: int | None, device: Device) -> tuple[Term, str]:
    """The calls' dispatch on a device that says what a synchronous call costs (``sync_call_us``, the TPU's round
    trip): the calls the host waited for on the CPU at that cost, the chained ones at the dispatch figure's low end
    (the same Python root finder's 0.57 ms a step where it reads each result, 0.12 ms where its calls chain)."""
    sync = device.optional("sync_call_us")
    if sync is None or synced is None:
        return term, words
    waited, chained = min(synced, count), count - min(synced, count)
    each = device.figure("dispatch_us").low
    low, high = (waited * sync.low + chained * each) * 1e-6, (waited * sync.high + chained * each) * 1e-6
    words = (
        f"{count:,} jitted call{'s' if count != 1 else ''}: {waited:,} waited for by the host × "
        f"{sync.text(' µs')} (round trip), {chained:,} chained × {each:g} µs"
    )
    return replace(term, low_s=low, high_s=high, words=words), words


def _transfer_term(cell: _Cell, device: Device, table: DeviceTable, all_pinned: bool) -> Term | None:
    """Host↔device copies: as measured when every call stays on the CPU, else as the GPU would copy."""
    if all_pinned and cell.copies_s > 0:
        # Every call stays on the CPU, and so do the arrays they take: the copies are as measured.
        return Term(
            kind="transfer",
            low_s=cell.copies_s,
            high_s=cell.copies_s,
            words=f"host↔device copies on the CPU as measured ({units.seconds(cell.copies_s)}): "
            "the calls are pinned there",
            figures=Basis("measured"),
        )
    return transfer_term(cell.cell.programs.transfers if cell.cell.programs is not None else None, device, table.model)


def _weight(term: Term) -> float:
    return float("inf") if term.high_s is None else (term.low_s + term.high_s) / 2


def _dominant(terms: list[Term]) -> Term | None:
    return max(terms, key=_weight) if terms else None


def _verdict(cpu: float, low: float, high: float | None) -> CellVerdict:
    if high is not None and high < cpu * (1 - MARGIN):
        return "faster"
    if low > cpu * (1 + MARGIN):
        return "slower"
    if high is None or low < cpu * (1 - MARGIN) or high > cpu * (1 + MARGIN):
        # The range reaches beyond the CPU time's ±10 % on one side at least: similar is not what it says.
        return "uncertain"
    return "similar"


def _holds_when_stretched(dominant: Term | None, cpu: float, low: float, high: float | None) -> bool:
    """Whether a faster or slower verdict survives the dominant term being off by its own width once more.

    A wide term is a guess of its size; the verdict it gives stands only when a guess as far off again
    would not change it (a cos of 4–24 ms in a cell that took 4 s on the CPU is faster on the GPU however
    the 4–24 ms is wrong; a loop of 0.1–2 s against 1 s of CPU is not)."""
    if dominant is None or high is None or dominant.high_s is None or dominant.low_s <= 0:
        return False
    ratio = dominant.high_s / dominant.low_s
    verdict = _verdict(cpu, low, high)
    if verdict == "faster":
        return high + dominant.high_s * (ratio - 1) < cpu * (1 - MARGIN)
    if verdict == "slower":
        return low - dominant.low_s * (1 - 1 / ratio) > cpu * (1 + MARGIN)
    return False


def _spread(term: Term) -> float:
    return float("inf") if term.high_s is None else term.high_s - term.low_s


def _uncertainty(
    dominant: Term | None,
    cpu: float,
    low: float,
    high: float | None,
    terms: list[Term] | None = None,
    device: Device | None = None,
) -> Uncertainty | None:
    """Why a cell's verdict is "uncertain" (None when it is not): its range straddles the CPU time, or
    its dominant term is wider than ×4 and the verdict would not survive that term being off by its width
    again; what is unknown and what would settle it. When the dominant term has no width of its own (host
    work, as measured), what is unknown is behind the widest of the other ``terms``."""
    wide = (
        dominant is not None
        and dominant.kind not in ("host",)
        and (
            dominant.high_s is None
            or (dominant.low_s > 0 and dominant.high_s / dominant.low_s > UNCERTAIN_RATIO * 1.01)
        )
    )
    if _verdict(cpu, low, high) != "uncertain" and not (wide and not _holds_when_stretched(dominant, cpu, low, high)):
        return None
    assert dominant is not None
    ratio = None if dominant.high_s is None or dominant.low_s <= 0 else dominant.high_s / dominant.low_s
    cause = dominant  # the term whose width is unknown
    kind = device.kind if device is not None else "GPU"
    if _spread(dominant) <= 0 and terms and _spread(widest := max(terms, key=_spread)) > 0:
        cause = widest
    if cause.kind == "loop" and cause.trip_count_basis in ("unknown", "estimated"):
        unknown = f"the trip count of {cause.name or 'a loop'}"
        settle = f"a longer CPU run (its trace counts the iterations), or a {kind} run"
    elif cause.kind == "unattributed":
        unknown = (
            "what ran in the time a trace cut short did not attribute"
            if cause.unseen
            else "which program ran the JAX time the trace did not attribute"
        )
        settle = f"a run whose trace captures the program, or a {kind} run"
    elif cause.kind == "compile":
        unknown = f"XLA:{kind}'s compile time"
        # No run calibrates the compile figures: a run on the device measures this notebook's compile itself.
        settle = f"a {kind} run, then `nbscope compare`"
    else:
        # The term's own words are printed just before this (dominant_words): name it, don't repeat it.
        unknown = f"the device's figures behind the {cause.kind} term" + (f" of {cause.name}" if cause.name else "")
        settle = f"calibrate on a {kind} (nbscope loops / bench there, then forecast --calibrate-from)"
    return Uncertainty(
        unknown=unknown, settle=settle, dominant_ratio=ratio, straddles=_verdict(cpu, low, high) == "uncertain"
    )


# ---- the notebook ----------------------------------------------------------------------------------


@dataclass
class _Tally:
    """One jitted function's forecast GPU time and measured CPU time, added up over the cells (a working copy)."""

    function: str
    gpu_low_s: float = 0.0
    gpu_high_s: float | None = 0.0
    cpu_s: float = 0.0
    cpu_whole_s: float = 0.0  # as much as its calls may have taken: a cut cell's JAX time where its trace saw less
    cells: list[int] = field(default_factory=list)
    kind: str | None = None
    programs: set[str | None] = field(default_factory=set)

    def program_keys(self) -> tuple[str, ...]:
        return tuple(sorted(p for p in self.programs if p))


def _notebook(
    cells: tuple[CellForecast, ...], device: Device, sources: dict[int, str], has_jax: bool, failed: tuple[int, ...]
) -> NotebookForecast:
    key = device.key
    cpu_total = sum(c.cpu.wall_s for c in cells)
    outcomes = [c.gpu[key] for c in cells]
    low = sum(o.low_s for o in outcomes)
    high = None if any(o.high_s is None for o in outcomes) else sum(o.high_s for o in outcomes if o.high_s is not None)
    low, high = _notebook_compile(cells, device, low, high)
    if not has_jax:
        return NotebookForecast(
            cpu_s=cpu_total,
            low_s=low,
            high_s=high,
            all_on_gpu="unchanged",
            verdict="unchanged",
            keep_on_cpu=(),
            gains=(),
            plan=None,
            ranking=(),
            uncertain=(),
            most_slower=None,
            most_faster=None,
            not_forecast=failed,
        )
    functions = _tallies(cells, key)
    keep, gains = _kept_and_gained(functions, cells, sources, max(MATERIAL_S, 0.01 * cpu_total), device.kind)
    # A function that raises there gains nothing there, whatever its programs' figures.
    raising = raising_functions(cells, key)
    gains = [g for g in gains if g.function not in raising]
    keep.sort(key=lambda e: -e.slower_by_s)
    gains.sort(key=lambda e: -e.faster_by_s)
    plan_low, plan_high = low, high
    for kept in keep:
        plan_low += kept.cpu_s - kept.gpu_low_s
        if plan_high is not None and kept.gpu_high_s is not None:
            plan_high += kept.cpu_s - kept.gpu_high_s
    failing = tuple(c.index for c in cells if c.gpu[key].fails)
    all_on_gpu = "fails" if failing else _verdict(cpu_total, low, high)
    verdict: NotebookVerdict
    if failing:
        verdict = "fails"  # whatever the times: the notebook raises there until those functions stay on the CPU
    elif keep and gains and plan_high is not None and plan_high < cpu_total * (1 - MARGIN):
        verdict = "mixed"
    else:
        verdict = all_on_gpu
    ranking = sorted((c for c in cells if c.gpu[key].verdict != "unchanged"), key=lambda c: -abs(c.gpu[key].change()))
    return NotebookForecast(
        cpu_s=cpu_total,
        low_s=low,
        high_s=high,
        all_on_gpu=all_on_gpu,
        verdict=verdict,
        keep_on_cpu=tuple(keep),
        gains=tuple(gains),
        plan=Plan(
            keep_on_cpu=tuple(sorted(k.function for k in keep)),
            low_s=max(0.0, plan_low),
            high_s=None if plan_high is None else max(0.0, plan_high),
        )
        if keep
        else None,
        ranking=tuple(c.index for c in ranking),
        uncertain=tuple(c.index for c in ranking if c.gpu[key].verdict == "uncertain"),
        most_slower=_extreme(ranking, key, slower=True),
        most_faster=_extreme(ranking, key, slower=False),
        not_forecast=failed,
        unbounded=tuple(c.index for c in cells if c.gpu[key].high_s is None),
        failing=failing,
    )


def raising_functions(cells: Sequence[CellForecast], key: str) -> list[str]:
    """The functions forecast to raise on device ``key`` (a float64 LU on a TPU), by name."""
    return sorted({f.function for cell in cells for f in cell.gpu[key].fails})


def _tallies(cells: tuple[CellForecast, ...], key: str) -> dict[str, _Tally]:
    """Per jitted function: its forecast GPU time against its CPU time measured in the trace."""
    functions: dict[str, _Tally] = {}
    for cell in cells:
        for term in cell.gpu[key].terms:
            name = term.function
            if not name or term.kind in ("host", "compile", "transfer", "unattributed", "cpu"):
                continue
            tally = functions.setdefault(name, _Tally(function=name))
            tally.gpu_low_s += term.low_s
            tally.gpu_high_s = (
                None if tally.gpu_high_s is None or term.high_s is None else (tally.gpu_high_s + term.high_s)
            )
            tally.programs.add(term.program)
            if cell.index not in tally.cells:
                tally.cells.append(cell.index)
        # A trace cut short saw part of its programs' time (a sampler's 3.3 ms of its 1.4 s): there a function is
        # credited up to the cell's whole JAX time, so that keeping it on the CPU is never advised from a fraction.
        window = cell.recorded.programs.window if cell.recorded is not None and cell.recorded.programs else None
        cut = window is not None and bool(window.cut)
        credited: defaultdict[str, float] = defaultdict(float)
        for execution in cell.programs:
            ran = functions.get(execution.function) if execution.function else None
            if ran is not None:
                credited[ran.function] += float(execution.cpu_s or 0.0)
                ran.kind = ran.kind or execution.kind
        for name, seconds in credited.items():
            functions[name].cpu_s += seconds
            functions[name].cpu_whole_s += max(seconds, cell.cpu.jax_s) if cut else seconds
    return functions


def _kept_and_gained(
    functions: dict[str, _Tally],
    cells: tuple[CellForecast, ...],
    sources: dict[int, str],
    threshold: float,
    device_word: str,
) -> tuple[list[KeptFunction], list[GainedFunction]]:
    """The functions the GPU makes slower by more than ``threshold`` (to keep on the CPU), and those it makes
    faster by more."""
    keep: list[KeptFunction] = []
    gains: list[GainedFunction] = []
    for tally in functions.values():
        slower_by = tally.gpu_low_s - tally.cpu_whole_s
        if slower_by > threshold and tally.gpu_low_s > tally.cpu_whole_s * (1 + MARGIN):
            keep.append(
                KeptFunction(
                    function=tally.function,
                    gpu_low_s=tally.gpu_low_s,
                    gpu_high_s=tally.gpu_high_s,
                    cpu_s=tally.cpu_whole_s,
                    cells=tuple(tally.cells),
                    kind=tally.kind,
                    slower_by_s=slower_by,
                    change=_code_change(tally, cells, sources, device_word),
                    programs=tally.program_keys(),
                )
            )
        elif tally.gpu_high_s is not None and tally.cpu_s - tally.gpu_high_s > threshold:
            gains.append(
                GainedFunction(
                    function=tally.function,
                    gpu_low_s=tally.gpu_low_s,
                    gpu_high_s=tally.gpu_high_s,
                    cpu_s=tally.cpu_s,
                    cells=tuple(tally.cells),
                    kind=tally.kind,
                    faster_by_s=tally.cpu_s - tally.gpu_high_s,
                    programs=tally.program_keys(),
                )
            )
    return keep, gains


def _notebook_compile(
    cells: tuple[CellForecast, ...], device: Device, low: float, high: float | None
) -> tuple[float, float | None]:
    """The notebook's range with its forecast compile bounded as a whole where the device gives a mean compile per
    program: a class's programs compile unevenly (one in ten takes ×40 its CPU compile), but over many of them
    (``MEAN_PROGRAMS``) their compile narrows to their count times the class's mean."""
    if device.optional("compile_mean_s") is None and device.optional("target_compile_factor") is None:
        return low, high
    by_class: dict[str, list[ClassCompile]] = defaultdict(list)
    for cell in cells:
        for term in cell.gpu[device.key].terms:
            if term.kind == "compile" and isinstance(term.figures, CompileFigures):
                for part in term.figures.classes:
                    by_class[part.name].append(part)
    for name, parts in by_class.items():
        programs = sum(p.programs for p in parts)
        if name == accelerator.COMPILED_HERE:
            low, high = _compiled_here_total(parts, programs, device, low, high)
            continue
        mean = accelerator.class_figure(device, "compile_mean_s", name, fallback=False)
        if mean is None or programs < MEAN_PROGRAMS:
            continue
        cells_low, cells_high = sum(p.low_s for p in parts), sum(p.high_s for p in parts)
        whole_low, whole_high = max(cells_low, programs * mean.low), min(cells_high, programs * mean.high)
        if whole_low <= whole_high:
            low, high = low - cells_low + whole_low, None if high is None else high - cells_high + whole_high
    return low, high


def _compiled_here_total(
    parts: list[ClassCompile], programs: int, device: Device, low: float, high: float | None
) -> tuple[float, float | None]:
    """The notebook's range with its programs compiled here bounded as a whole by ``target_compile_factor_total``."""
    each, whole = device.optional("target_compile_factor"), device.optional("target_compile_factor_total")
    if each is None or whole is None or programs < MEAN_PROGRAMS:
        return low, high
    seconds = sum(p.low_s for p in parts) / each.low  # this machine's compile of them
    cells_low, cells_high = sum(p.low_s for p in parts), sum(p.high_s for p in parts)
    whole_low, whole_high = max(cells_low, seconds * whole.low), min(cells_high, seconds * whole.high)
    if whole_low > whole_high:
        return low, high
    return low - cells_low + whole_low, None if high is None else high - cells_high + whole_high


def _extreme(ranking: list[CellForecast], key: str, *, slower: bool) -> int | None:
    """The cell the GPU makes slower (or faster) by the most seconds, if any."""
    sign = 1 if slower else -1
    cells = [c for c in ranking if sign * c.gpu[key].change() > 0]
    return max(cells, key=lambda c: sign * c.gpu[key].change()).index if cells else None


def _code_change(
    tally: _Tally, cells: tuple[CellForecast, ...], sources: dict[int, str], device_word: str
) -> CodeChange:
    """The change that keeps a function on the CPU: run its calls under ``jax.default_device(cpu)``."""
    name = tally.function
    lines = [c.line for c in cells if c.index in tally.cells]
    where = ", ".join(str(line) for line in lines if line) or ", ".join(str(i + 1) for i in tally.cells)
    place = "lines" if any(lines) else "cells"
    example = None
    for index in tally.cells:
        source = sources.get(index)
        if not source:
            continue
        call = next((ln for ln in source.splitlines() if f"{name}(" in ln and not ln.lstrip().startswith("def ")), None)
        if call is not None:
            example = f"with jax.default_device({CPU_DEVICE}):\n    {call.strip()}"
            break
    user = tally.kind in ("user", "library")
    what = f"the calls of `{name}`" if user else "the code of these cells"
    return CodeChange(
        text=(
            f"run {what} (cells at {place} {where}) inside "
            f"`with jax.default_device({CPU_DEVICE}):`; arguments already on the {device_word} move with "
            f'`jax.device_put(x, {CPU_DEVICE})` (`jax.jit(..., backend="cpu")` is deprecated)'
        ),
        example=example,
    )


def _notebook_sources(record: RunRecord, run: NotebookRun) -> dict[int, str]:
    """Code cell sources by index: the code that ran (``run``: the record's typed run)."""
    by_hash, _ = load_sources(record)
    return {c.index: by_hash[c.source_hash] for c in run.cells if c.source_hash in by_hash}
