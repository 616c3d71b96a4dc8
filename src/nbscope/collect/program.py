"""Program data for ``nbscope profile --forecast``: what each cell's compiled JAX programs are and how
often they ran, read in the nbscope process from what the probe wrote (``probe/_nbscope_program.py``).

Per cell the probe leaves a ``jax.profiler`` trace and, after a cell that compiled, the optimised HLO of
every live program. Here:

* each new program's HLO is described by :func:`nbscope.collect.hlo.describe` (loops, trip counts,
  syncs, work, dtypes) and kept in the run's ``programs`` table, keyed ``<module>#<program id>``;
* the cell's trace is read for **executions**: XLA:CPU records every thunk it runs with its program's
  ``hlo_module``, ``program_id`` and a ``run_id`` per execution, so a program's executions are its
  distinct run ids and its CPU time the union of its thunks' spans. Reading an event's stats costs
  ~35 µs (jax 0.10.2), so beyond ``MAX_STAT_READS`` events per cell the rest are sampled evenly and the
  figures scaled, and the cell says so (``sampled``). On a GPU, executions come from the device plane's
  ``XLA Modules`` line instead (module names only).
* **transfers**: host→device copies (``DevicePut…``) and device→host conversions (``np.asarray``) are
  counted, with the time they took on the CPU. Only data that starts on the host is copied (arrays a
  program made stay on the device). The CPU trace carries no sizes: a copy made while a jitted call
  parses its arguments moved one of that program's parameters, so its bytes lie between the smallest
  parameter and the largest one the copy's CPU time allows (``HOST_COPY_BYTES_PER_NS``); other copies
  (``unsized``) have only that time bound.

Programs compiled in a cell whose trace is missing (the cell imported jax itself, or the notebook ran
its own profiler) count as run at least once, labelled ``count_basis: "compiled"``.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import math
import re
import typing
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

from nbscope._redact import shorten
from nbscope.collect import hlo
from nbscope.collect._xla import XlaTools
from nbscope.collect._xspace import hlo_modules, hlo_programs
from nbscope.collect.notebook import CodeCell
from nbscope.collect.timeline import D2H_EVENTS, H2D_EVENTS, TraceData, TraceEvent, TracePlane
from nbscope.schema.codec import Write, decode, encode, given, known, never
from nbscope.schema.model import Cell
from nbscope.schema.probe import GpuLoweringEntry, ProbePrograms
from nbscope.schema.programs import CallRate, CollectTimes, TraceWindow, Transfers
from nbscope.schema.trace_stats import OpStats

PROGRAMS_VERSION = 1
# The fastest a CPU copies host memory (bytes per ns = GB/s, assumed): a copy that took t ns on the CPU
# moved at most t × this many bytes, which bounds copies the trace gives no size for.
HOST_COPY_BYTES_PER_NS = 20.0
MAX_STAT_READS = 40_000  # ≈ 1.5 s of stats reads per cell, outside the kernel
_H2D_WORK = "H2D Dispatch"  # the copy itself, on XLA:CPU's worker thread, after the DevicePut that asked for it
_CALL = re.compile(r"^(PjitFunction|PmapFunction)\((.*)\)$")
_LOOP_CALL = re.compile(r"\b(?:jax\.)?(?:lax\.)?(scan|fori_loop|while_loop|map|associative_scan)\s*\(")


def _normal(name: str) -> str:
    """A function or module name with everything but letters and digits dropped: ``<lambda>`` and
    ``jit__lambda`` both become ``lambda``."""
    return re.sub(r"[^A-Za-z0-9]", "", name)


def _not_from_run_ids(execution: Executed) -> bool:
    return not execution.from_run_ids


def _whole_trace(result: CellResult) -> bool:
    return not result.cut


@dataclass(slots=True)
class LoopSeen:
    """What a cell's trace showed of one loop of a program it executed (``schema.programs.ObservedLoop``)."""

    iterations: Annotated[float | None, Write(when=known)] = None  # per execution, from the body's kernels
    cpu_s: Annotated[float | None, Write(when=known)] = None  # inside the loop, over the cell's executions
    basis: Annotated[str | None, Write(when=known)] = None  # "re-run": counted in a sampled call run again


@dataclass(slots=True)
class Executed:
    """One program's executions in a cell as the collector counts them (``schema.programs.Execution`` reads
    them back); a cut trace's extrapolation rescales them in place."""

    program: str
    count: int | None
    count_basis: str
    # only an execution counted from the trace's run ids has it (null when every event was read)
    sampled_runs: Annotated[int | None, Write(omit=_not_from_run_ids)] = None
    cpu_s: float | None = None
    loops: Annotated[dict[str, LoopSeen], Write(when=given)] = field(default_factory=dict)
    traced_count: Annotated[int | None, Write(when=known)] = None
    traced_fraction: Annotated[float | None, Write(when=known)] = None
    synced: Annotated[int | None, Write(when=known)] = None  # calls the host waited for (the probe's ``synced``)
    from_run_ids: Annotated[bool, Write(when=never)] = False


@dataclass(slots=True)
class CellResult:
    """A cell's ``programs`` as the collector builds it (``schema.programs.CellPrograms`` reads it back),
    written with the keys, and in the order, records have always had."""

    executions: list[Executed] = field(default_factory=list)
    transfers: Transfers | None = None
    sampled: bool = False
    trace: str | None = None  # "read", or why the cell has no trace
    hlo_error: Annotated[str | None, Write(when=known)] = None
    new_programs: list[str] = field(default_factory=list)
    uncaptured: Annotated[dict[str, int], Write(when=given)] = field(default_factory=dict)
    cpu_busy_s: Annotated[float | None, Write(when=known)] = None
    xla_busy_s: Annotated[float | None, Write(when=known)] = None
    call_rate: Annotated[CallRate | None, Write(omit=_whole_trace)] = None  # kept for a cut trace only
    window: Annotated[dict[str, Any] | None, Write(when=known)] = None
    collect_s: CollectTimes | None = None
    cut: Annotated[bool, Write(when=never)] = False  # the trace was read and the probe cut it short
    counted: Annotated[bool | None, Write(when=known)] = None  # every execution counted by the probe (not the trace)


def _running_times(
    covered: TraceWindow, wall: float, traced: float, cell_wait: float | None, compile_s: float | None
) -> tuple[float, float]:
    """The time calls could run in the whole cell and in its traced window: JAX's compile left out of both (no
    call runs while JAX compiles), and the time the cell's thread waited for a CPU."""
    running, running_traced = wall, traced
    compiled_before = covered.compile_s
    if (
        compiled_before is not None
        and compile_s is not None
        and running - compile_s > 0
        and running_traced - compiled_before > 0
    ):
        running, running_traced = running - compile_s, running_traced - compiled_before
    # The time the cell's thread waited for a CPU (load on the machine) ran no calls: rates are judged over
    # the time it did not wait, in the traced window and in the whole cell. A wait falls on compiling and
    # calling alike, so each side keeps its share of time not waited (taken whole, a window's wait of 1 s
    # against its 1.05 s of calls after 6.3 s of compile made 20 calls 218).
    window_wait = covered.wait_s
    if window_wait is not None and cell_wait is not None and wall > cell_wait >= 0 and traced > window_wait >= 0:
        running *= 1 - cell_wait / wall
        running_traced *= 1 - window_wait / traced
    return running, running_traced


def _extrapolate(
    result: CellResult,
    window: Mapping[str, Any],
    wall: float | None,
    cell_wait: float | None = None,
    compile_s: float | None = None,
    trips: dict[str, dict[str, int]] | None = None,
    *,
    counted: bool = False,
) -> None:
    """A trace the probe cut short (its memory budget) covered the cell's first ``traced_s``: what it
    counted goes for the whole cell at the same rate, each figure labelled ``extrapolated``. ``compile_s``:
    JAX's compile time in the whole cell; with the window's own (``TraceWindow.compile_s``, read at the cut)
    it is left out of both, as no call runs while JAX compiles (a cell that compiles for 10 s and then
    makes 50 calls of 0.6 s each, cut after the first, is 50 calls, not 1 × 42 s / 11 s). ``trips``: per
    program, its outermost loops' static trip counts: an execution whose loop the window saw only part of
    was still running at the cut, and counts as that part of a call (one scan of 10 M steps cut halfway
    through is one call, not two). ``cell_wait``: the cell's thread's wait for a CPU (``sched``)."""
    covered = decode(TraceWindow, window)
    traced = covered.traced_s
    if traced is None or wall is None or traced <= 0:
        return
    running, running_traced = _running_times(covered, wall, traced, cell_wait, compile_s)
    rate = result.call_rate
    if rate is not None and rate.late_per_s and rate.calls:
        # Calls go on after the cut at the rate of the traced calls' later half, not at their mean rate.
        untraced = max(0.0, running - running_traced)
        scale = max(1.0, (rate.calls + rate.late_per_s * untraced) / rate.calls)
    else:
        scale = max(1.0, running / running_traced)
    result.window = {**window, "cell_s": wall, "scale": scale}
    for execution in result.executions:
        seen = execution.count or execution.sampled_runs
        if seen is not None:
            execution.traced_count = seen
            fraction = _traced_fraction(execution, (trips or {}).get(execution.program) or {}, seen)
            if fraction < 1:
                execution.traced_fraction = fraction
        if counted:  # the probe counted every execution (ProgramCollector._count): its time is not scaled here
            continue
        if seen is not None:
            least = seen if fraction >= 1 else max(1, math.ceil(seen * fraction))
            execution.count = max(least, round(seen * fraction * scale))
            execution.count_basis = "extrapolated"
        if execution.cpu_s is not None:
            execution.cpu_s *= scale
        for loop in execution.loops.values():
            if loop.cpu_s is not None:
                loop.cpu_s *= scale
    if result.cpu_busy_s is not None and not counted:
        result.cpu_busy_s *= scale
    if result.xla_busy_s is not None and not counted:
        result.xla_busy_s *= scale
    if (moved := result.transfers) is not None and not counted:  # counted: scaled with the calls (_count)
        result.transfers = _scaled_transfers(moved, scale)


def _scaled_transfers(transfers: Transfers, scale: float) -> Transfers:
    """A cut trace's copies for the whole cell: counts rounded, bytes and time scaled."""

    def count(value: int | None) -> int | None:
        return None if value is None else round(value * scale)

    def figure(value: float | None) -> float | None:
        return None if value is None else value * scale

    return replace(
        transfers,
        host_to_device=count(transfers.host_to_device),
        device_to_host=count(transfers.device_to_host),
        sized=count(transfers.sized),
        unsized=count(transfers.unsized),
        bytes_low=figure(transfers.bytes_low),
        bytes_high=figure(transfers.bytes_high),
        cpu_s=figure(transfers.cpu_s),
    )


def _traced_fraction(execution: Executed, trips: dict[str, int], seen: int) -> float:
    """How many of the ``seen`` executions the window saw whole, as a share: below 1 when an outermost loop
    with a static trip count showed fewer iterations than the executions would have run (the last was cut)."""
    shares = [
        loop.iterations / trip
        for loop_id, trip in trips.items()
        if trip and (loop := execution.loops.get(loop_id)) is not None and loop.iterations is not None
    ]
    return max(0.0, min([1.0, *shares])) if seen else 1.0


def _late_call_rate(calls: dict[int, list[tuple[int, int, str]]]) -> CallRate | None:
    """Jitted calls per second over the later half of a trace's calls (their outermost events): a
    session's first calls are its slowest (measured: a window of 5,000 calls counted a million-call cell as
    0.36–0.66 M calls at its mean rate), so a trace cut short is extrapolated at this rate. None with fewer
    than 200 calls, where the rate says little."""
    starts: list[int] = []
    for events in calls.values():
        end = -1
        for start, stop, _ in sorted(events):
            if start >= end:  # not nested in the call before it
                starts.append(start)
                end = stop
    if len(starts) < 200:
        return None
    starts.sort()
    half = starts[len(starts) // 2 :]
    span = (half[-1] - half[0]) / 1e9
    if span <= 0:
        return None
    return CallRate(calls=len(starts), late_calls=len(half) - 1, late_s=span, late_per_s=(len(half) - 1) / span)


def _tail(stack: str | None) -> str:
    """A name stack below its program's own scope: ``jit(f)/jit(solve)/while`` → ``jit(solve)/while``."""
    return (stack or "").split("/", 1)[-1]


def function_of(module: str) -> str:
    """The jitted function behind a module name (``jit_qm_jax`` → ``qm_jax``)."""
    module = re.sub(r"^(jit|pmap|xmap)_", "", module)
    return "<lambda>" if re.fullmatch(r"_lambda_?", module) else module


@dataclass
class _TraceEvents:
    """A cell trace's events that the program data is read from, by kind (times in ns)."""

    # a known program's thunks: (event, start, end, line)
    ops: list[tuple[Any, int, int, int]] = field(default_factory=list)
    calls: dict[int, list[tuple[int, int, str]]] = field(default_factory=dict)  # jitted calls by thread line
    h2d: list[tuple[int, int, int]] = field(default_factory=list)
    d2h: list[tuple[int, int]] = field(default_factory=list)
    h2d_work: list[tuple[int, int]] = field(default_factory=list)
    gpu_modules: Counter[str] = field(default_factory=Counter)
    xla_spans: list[tuple[int, int]] = field(default_factory=list)  # all XLA:CPU's workers ran, attributed or not
    executes: list[tuple[int, int]] = field(default_factory=list)  # a program's thunks running, bookkeeping included
    # The end markers XLA:CPU records as a loop's kernels end ((name, time)): a kernel running as one session part
    # stopped and the next started is in neither part, but its marker is in the next one (see _recovered).
    end_marks: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class _Attribution:
    """What the trace's events say of each program: its runs, time spans, kernels seen and loop timers."""

    step: int  # every step-th op event's stats were read
    runs: dict[int, set[int]] = field(default_factory=dict)
    spans: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    seen: Counter[tuple[int, str]] = field(default_factory=Counter)  # (program id, kernel name) → events read
    timer_ns: Counter[tuple[int, str]] = field(default_factory=Counter)  # (program id, loop's timing thunk) → ns
    unknown_modules: dict[str, set[int]] = field(default_factory=dict)
    attributed: list[tuple[int, int]] = field(default_factory=list)  # execution spans a known program claimed
    unattributed: list[tuple[int, int]] = field(default_factory=list)  # JAX time no known program claimed


class ProgramCollector:
    """Collects program data over one execution of a notebook (one kernel)."""

    def __init__(self, code_cells: list[CodeCell]) -> None:
        self.code_cells = code_cells
        self.programs: dict[str, hlo.ProgramDescription] = {}
        self.key_of: dict[int, str] = {}  # program id → key
        self.op_names: dict[int, set[str]] = {}  # program id → names of its kernel instructions
        self.loop_ops: dict[int, dict[str, LoopKernels]] = {}  # program id → loop id → body kernels, timer
        self.trips: dict[str, dict[str, int]] = {}  # program key → its outermost loops' static trip counts
        self.timers: dict[int, set[str]] = {}  # program id → names of the thunks that time its loops
        self.loop_body_names: dict[int, frozenset[str]] = {}  # program id → the kernels of its loops' bodies
        self.all_op_names: set[str] = set()
        self.cpu_each: dict[str, float] = {}  # program key → CPU seconds per execution, from a whole trace
        self.rerun: dict[tuple[str, str], float] = {}  # (program key, loop id) → iterations a call run again counted
        self.notes: list[str] = []
        self._xla: XlaTools | None = None
        self._profile_data: Any = None

    # ---- per cell ------------------------------------------------------------------------------
    def cell(self, probe: ProbePrograms, record: dict[str, Any]) -> dict[str, Any]:
        """The cell's ``programs`` field from the probe's line (and the cell record so far)."""
        result = CellResult()
        new_programs: list[str] = []
        cell = decode(Cell, record)
        where = f"cell {cell.index + 1}"
        if probe.programs:
            try:
                new_programs = self._read_programs(Path(probe.programs), cell)
            except Exception as exc:  # a broken file must not lose the cell's other figures
                self.notes.append(shorten(f"{where}: HLO unreadable: {type(exc).__name__}: {exc}", 300))
        elif probe.programs_error:
            result.hlo_error = probe.programs_error
        result.new_programs = new_programs
        self._read_lowerings(probe, new_programs, where)
        if probe.trace_note:
            self.notes.append(shorten(f"{where}: {probe.trace_note}", 300))
        if probe.trace:
            try:
                self._read_trace(Path(probe.trace), result)
                result.trace = "read"
            except Exception as exc:
                result.trace = shorten(f"unreadable: {type(exc).__name__}: {exc}", 300)
        else:
            result.trace = probe.trace_error or "no trace"
        # A whole trace counts every call: no rate to extrapolate at, and none is written.
        result.cut = result.trace == "read" and probe.window is not None
        counts = self._counts(probe)
        if result.cut and probe.window is not None:
            compiled = cell.jax.compile_s if cell.jax is not None else 0
            ran = {e.program for e in result.executions}
            trips = {key: trips for key, trips in self.trips.items() if key in ran}
            _extrapolate(
                result,
                probe.window,
                cell.wall_s,
                cell.sched.wait_s if cell.sched else None,
                compiled,
                trips,
                counted=counts is not None,
            )
        if counts is not None:
            self._count(result, counts)
            result.counted = True
        self._what_calls_showed(result, probe, where)
        counted = {e.program for e in result.executions}
        for key in new_programs:
            if key not in counted and result.trace != "read" and counts is None:
                # Compiled here, so called here at least once; how often is not known.
                result.executions.append(Executed(program=key, count=1, count_basis="compiled"))
        result.collect_s = CollectTimes(
            trace_stop_s=probe.trace_stop_s, programs_s=probe.programs_s, gpu_lowering_s=probe.gpu_lowering_s
        )
        if not probe.shared:
            _remove(probe.trace)
        _remove(probe.programs)
        _remove(probe.gpu_lowering)
        _remove(probe.target)
        return typing.cast(dict[str, Any], encode(result))

    def _counts(self, probe: ProbePrograms) -> dict[str, int] | None:
        """The probe's count of every execution in the cell, by program key (None: not counted, or not wholly: an
        older probe, JAX's hook replaced, or an execution whose program is not in the run's table)."""
        if probe.counts is None or probe.counts_note or probe.uncounted:
            return None
        counts: Counter[str] = Counter()
        for program_id, runs in probe.counts.items():
            if int(program_id) not in self.key_of:
                return None
            counts[self.key_of[int(program_id)]] += runs
        return counts

    def _count(self, result: CellResult, counts: dict[str, int]) -> None:
        """Every execution from the probe's counts: the trace, where it saw a program, gives its time per execution
        (of the executions it saw whole: a loop with a static trip count cut part-way is that part of one);
        a program the trace did not see (it ran after a cut) takes its time per execution from another cell's
        whole trace, else none. What was counted is never extrapolated from time."""
        seen = {e.program: e for e in result.executions}
        if result.cut and result.transfers is not None:
            # Copies go with calls: a cut trace's copies scale with the calls counted against the calls it saw, not
            # with its time (a window that saw 2 copies of a cell that then ran one long program made 175 of 50 GB).
            traced_calls = sum(e.traced_count or e.count or 0 for e in result.executions)
            calls = sum(counts.values())
            result.transfers = _scaled_transfers(
                result.transfers, max(1.0, calls / traced_calls) if traced_calls else 1.0
            )
        for execution in result.executions:
            if execution.program not in counts:
                continue
            runs = counts[execution.program]
            traced = execution.traced_count or execution.count or execution.sampled_runs or 0
            whole = traced * (execution.traced_fraction or 1.0)
            if whole > 0 and execution.cpu_s is not None:
                factor = runs / whole
                execution.cpu_s *= factor
                for loop in execution.loops.values():
                    if loop.cpu_s is not None:
                        loop.cpu_s *= factor
                if not result.cut:
                    self.cpu_each[execution.program] = execution.cpu_s / max(1, runs)
            execution.count, execution.count_basis = runs, "counted"
        for key, runs in counts.items():
            if key not in seen and runs > 0:
                cpu = self.cpu_each[key] * runs if key in self.cpu_each else None
                result.executions.append(Executed(program=key, count=runs, count_basis="counted", cpu_s=cpu))
        if not result.cut and result.trace != "read":
            result.cpu_busy_s = sum(e.cpu_s or 0.0 for e in result.executions)

    def _what_calls_showed(self, result: CellResult, probe: ProbePrograms, where: str) -> None:
        """How many calls of each program the host waited for (``synced``), where the probe counted them. The iterations the probe counted in a sampled call run again (``loop_trips``), per execution, for each
        loop known only at run time: a ``while`` matched to its HLO loop by the source line both name (one each, else
        it is left to the trace). Exact for that call, they stand before a trace's count (a cut trace counted 3,693 of
        a solver's 17,720 iterations: tests/files/forecast_while_converge.md)."""
        if probe.loop_trips_error:
            self.notes.append(shorten(f"{where}: loops' iterations not counted: {probe.loop_trips_error}", 300))
        for program_id, calls in (probe.synced or {}).items():
            key = self.key_of.get(int(program_id))
            for ran in result.executions:
                ran.synced = min(calls, ran.count or calls) if ran.program == key else ran.synced
        for program_id, sites in (probe.loop_trips or {}).items():
            key = self.key_of.get(int(program_id))
            program = self.programs.get(key) if key is not None else None
            execution = next((e for e in result.executions if e.program == key), None)
            if program is None or execution is None:
                continue
            typed: list[tuple[str, int, float]] = [(str(f), int(n), float(i)) for f, n, i in sites]
            lines = Counter((file, line) for file, line, _ in typed)
            for file, line, iterations in typed:
                loops = [
                    loop
                    for loop in program.loops
                    if loop.trip_count is None
                    and not loop.cpu_only
                    and loop.source is not None
                    and (loop.source.file, loop.source.line) == (file, line)
                ]
                if lines[(file, line)] == 1 and len(loops) == 1:  # exact, where a trace may have lost events
                    seen = execution.loops.setdefault(loops[0].id, LoopSeen())
                    seen.iterations, seen.basis = float(iterations), "re-run"
                    self.rerun[(execution.program, loops[0].id)] = seen.iterations
        self._earlier_reruns(result)

    def _earlier_reruns(self, result: CellResult) -> None:
        """A loop no call of this cell counted (the kernel's budget for running calls again was spent, the trace was
        cut or saw none of it): as the latest call of its program an earlier cell ran again counted it."""
        for ran in result.executions:
            for (key, loop), iterations in self.rerun.items():
                seen = ran.loops.setdefault(loop, LoopSeen()) if key == ran.program else None
                if seen is not None and (seen.iterations is None or (seen.basis is None and result.cut)):
                    seen.iterations, seen.basis = iterations, "re-run earlier"

    def finish(self) -> dict[str, Any]:
        """The run's ``measurements.programs``."""
        xla = self._xla
        return {
            "version": PROGRAMS_VERSION,
            "programs": encode(self.programs),
            "cost_source": (
                None if xla is None else ("xla-cost-analysis" if xla.available and xla.error is None else "estimate")
            ),
            "notes": self.notes + ([xla.error] if xla is not None and xla.error else []),
        }

    # ---- HLO -----------------------------------------------------------------------------------
    def _read_programs(self, path: Path, cell: Cell) -> list[str]:
        if self._xla is None:
            self._xla = XlaTools()
        tools = self._xla
        if not tools.available:
            return []
        new = []
        functions = {_normal(f.name): f for f in (cell.jax.functions if cell.jax is not None else ())}
        read = hlo_modules if path.suffix == ".hlo" else hlo_programs
        for program in read(path.read_bytes()):
            if program.program_id is not None and program.program_id in self.key_of:
                continue
            key = f"{program.module}#{program.program_id}"
            text = tools.module_text(program.module_proto)
            try:
                description = hlo.describe(text, tools.cost)
            except Exception as exc:
                self.notes.append(shorten(f"{key}: HLO not understood: {type(exc).__name__}: {exc}", 300))
                continue
            function = function_of(program.module)
            compiled = functions.get(_normal(function))
            description.key, description.program_id, description.function = key, program.program_id, function
            description.kind = compiled.kind if compiled is not None else "unknown"
            description.first_cell = cell.index
            for loop in description.loops:
                _place(loop, self.code_cells, cell.index)
            self.programs[key] = description
            self.trips[key] = {
                loop.id: loop.trip_count
                for loop in description.loops
                if loop.parent is None and loop.trip_count is not None
            }
            if program.program_id is not None:
                self.key_of[program.program_id] = key
                names = _kernel_names(text)
                self.op_names[program.program_id] = names
                self.loop_ops[program.program_id] = _loop_kernels(text)
                self.timers[program.program_id] = {p.timer for p in self.loop_ops[program.program_id].values()}
                self.loop_body_names[program.program_id] = frozenset(
                    name for loop in self.loop_ops[program.program_id].values() for name in loop.body
                )
                self.all_op_names |= names
            new.append(key)
        return new

    def _read_lowerings(self, probe: ProbePrograms, new_programs: list[str], where: str) -> None:
        """The new programs' lowering for CUDA and the modules a TPU would compile, or notes saying why not."""
        if probe.gpu_lowering:
            try:
                self._read_gpu_lowering(Path(probe.gpu_lowering), new_programs)
            except Exception as exc:
                self.notes.append(shorten(f"{where}: GPU lowering unreadable: {type(exc).__name__}: {exc}", 300))
        elif probe.gpu_lowering_error:
            self.notes.append(shorten(f"{where}: no GPU lowering: {probe.gpu_lowering_error}", 300))
        if probe.target:
            try:
                self._read_target(Path(probe.target))
            except Exception as exc:
                self.notes.append(shorten(f"{where}: target modules unreadable: {type(exc).__name__}: {exc}", 300))
        elif probe.target_error:
            self.notes.append(shorten(f"{where}: no target modules: {probe.target_error}", 300))

    def _read_target(self, path: Path) -> None:
        """Attach to each program the module a TPU would compile of it (``_nbscope_program.TARGET_NAME``)."""
        for line in path.read_text().splitlines():
            item = json.loads(line)
            key = self.key_of.get(int(item["program"]))
            if key is not None and key in self.programs:
                self.programs[key].target = {k: str(v) for k, v in item.items() if k != "program"}

    def _read_gpu_lowering(self, path: Path, new_programs: list[str]) -> None:
        """Mark what each new program would run on the GPU, from its lowering for CUDA (in the
        kernel): a CPU loop with no matching GPU loop (same name stack below the program, same
        source line) exists only on the CPU (threefry rounds, LU loops); library calls are kept."""
        by_function = {
            _normal(entry.function or ""): entry
            for entry in (decode(GpuLoweringEntry, item) for item in json.loads(path.read_text()))
        }
        for key in new_programs:
            program = self.programs[key]
            entry = by_function.get(_normal(program.function or ""))
            if entry is None:
                continue
            if entry.skipped:
                program.gpu = hlo.GpuDescription(source=entry.source, loops=0, note=entry.skipped)
                for loop in program.loops:
                    loop.cpu_only = True
                continue
            if entry.error:
                program.gpu = hlo.GpuDescription(source=entry.source, error=entry.error)
                continue
            gpu_loops = [(_tail(g.stack), g.line) for g in entry.loops]
            program.gpu = hlo.GpuDescription(
                source=entry.source,
                loops=len(gpu_loops),
                custom_calls=dict(entry.custom_calls or {}),
                conditionals=entry.conditionals,
                seconds=entry.seconds,
            )
            remaining = list(gpu_loops)
            same = len(gpu_loops) == len(program.loops)  # as many on both: the same loops, however named
            for loop in program.loops:
                mine = (_tail(loop.op_name), loop.source.line if loop.source is not None else None)
                loop.cpu_only = not same and mine not in remaining
                if mine in remaining:
                    remaining.remove(mine)

    # ---- the trace -----------------------------------------------------------------------------
    def _read_trace(self, path: Path, result: CellResult) -> None:
        """A cell's profiler trace into ``result``: each known program's executions (count, CPU time, the
        iterations of its loops), transfers, and the JAX time no program claimed."""
        from nbscope.collect.timeline import covered, find_xplane, union

        if self._profile_data is None:
            from jax.profiler import ProfileData

            self._profile_data = ProfileData
        events = self._gather(self._profile_data.from_file(str(find_xplane(path))))
        found = self._attribute(events)
        result.sampled = found.step > 1
        executions = [self._execution(program_id, run_ids, found) for program_id, run_ids in found.runs.items()]
        executions += self._device_executions(events.gpu_modules)
        executions.sort(key=lambda e: -(e.cpu_s or 0.0))
        result.executions = executions
        result.uncaptured = {m: len(r) for m, r in found.unknown_modules.items()}
        ops = [(s, e) for _, s, e, _ in events.ops]
        result.cpu_busy_s = covered(union(found.attributed + ops)) / 1e9
        # JAX time no known program claimed (a program whose HLO was not captured): JAX time all the same.
        result.xla_busy_s = covered(union(found.unattributed + found.attributed + ops)) / 1e9
        result.transfers = self._transfers(events.h2d, events.d2h, events.calls, sorted(events.h2d_work))
        result.call_rate = _late_call_rate(events.calls)

    def _device_executions(self, modules: Counter[str]) -> list[Executed]:
        """A device's trace (a GPU's, a TPU's): executions by module name, each name's to the newest program of
        that name. The device names an execution ``jit_f(fingerprint)``, and the fingerprint is not the program's:
        on a TPU v5e an eager multiply compiled for 25 shapes had one, a dynamic slice a new one per shape. Each
        name is summed first, so that it makes one execution entry (taken apart, the 16 dynamic slices a trace saw
        were 16 entries of one program, each later counted as all its runs)."""
        by_name: Counter[str] = Counter()
        for module, count in modules.items():
            by_name[module.rsplit("(", 1)[0]] += count
        executions = []
        for name, count in by_name.items():
            keys = [key for key, program in self.programs.items() if program.module == name]
            if keys:
                executions.append(Executed(program=keys[-1], count=count, count_basis="device trace"))
        return executions

    def _gather(self, data: TraceData) -> _TraceEvents:
        """The trace's events by kind, in one pass over its host planes (and the GPU's module executions). A trace
        the probe wrote in parts (one profiler session after another: the session is stopped as each compile
        begins) is their XSpaces one after the other, each part's times counted from its own start: they are
        put on the first part's clock, by the start each part's ``Task Environment`` plane records."""
        events = _TraceEvents()
        planes = list(data.planes)
        starts = [_profile_start(plane) for plane in planes if plane.name == _TASK_ENVIRONMENT]
        first = next((start for start in starts if start is not None), None)
        part = 0
        line_id = 0
        loop_kernels = {name for names in self.loop_body_names.values() for name in names}
        for plane in planes:
            name = plane.name
            if name == _TASK_ENVIRONMENT:  # the end of a part's planes
                part += 1
                continue
            start = starts[part] if part < len(starts) else None
            shift = start - first if start is not None and first is not None else 0
            if name.startswith("/device:"):
                for line in plane.lines:
                    if line.name == "XLA Modules":
                        for event in line.events:
                            events.gpu_modules[event.name] += 1
                continue
            if not name.startswith("/host:") or name == "/host:metadata":
                continue
            for line in plane.lines:
                line_id += 1
                worker = _is_xla_worker(line.name)
                for event in line.events:
                    event_name = event.name
                    if event_name == _H2D_WORK:
                        events.h2d_work.append(_span(event, shift))
                    elif event_name.startswith(_EXECUTE):
                        events.executes.append(_span(event, shift))
                    elif event_name.startswith(_END_MARK):
                        if event_name[len(_END_MARK) :] in loop_kernels and len(events.end_marks) <= MAX_STAT_READS:
                            events.end_marks.append((event_name[len(_END_MARK) :], _span(event, shift)[0]))
                    elif worker and not event_name.startswith(_BOOKKEEPING):
                        events.xla_spans.append(_span(event, shift))
                    if event_name in self.all_op_names:
                        events.ops.append((event, *_span(event, shift), line_id))
                    elif event_name.startswith(("PjitFunction(", "PmapFunction(")):
                        match = _CALL.match(event_name)
                        events.calls.setdefault(line_id, []).append(
                            (*_span(event, shift), match.group(2) if match else "")
                        )
                    elif event_name in H2D_EVENTS:
                        events.h2d.append((*_span(event, shift), line_id))
                    elif event_name in D2H_EVENTS:
                        events.d2h.append(_span(event, shift))
        return events

    def _recovered(
        self, events: _TraceEvents, found: _Attribution, starts: list[int], sampled: list[tuple[int, int]]
    ) -> None:
        """Count a loop's kernels by their end markers too: XLA:CPU records one as each kernel ends, beside the
        kernel's own event, and where a session part's stop cut through a kernel (an iteration running as one
        part stopped and the next started) its event is in neither part but its marker is in the next. Each
        marker counts for the program whose kernel ran nearest it in time; a kernel's count is the larger of
        its events and its markers (a kernel whose event is in one part and its marker in the next is one)."""
        if found.step != 1 or not events.end_marks or not sampled or len(events.end_marks) > MAX_STAT_READS:
            return
        marks: Counter[tuple[int, str]] = Counter()
        for name, at in events.end_marks:
            after = bisect.bisect_left(starts, at)
            nearest = min(
                (i for i in (after - 1, after) if 0 <= i < len(sampled)), key=lambda i: abs(sampled[i][0] - at)
            )
            program_id = sampled[nearest][1]
            if program_id in self.loop_body_names and name in self.loop_body_names[program_id]:
                marks[(program_id, name)] += 1
        for key, count in marks.items():
            found.seen[key] = max(found.seen[key], count)

    def _attribute(self, events: _TraceEvents) -> _Attribution:
        """Which program each op event (every ``step``-th, past MAX_STAT_READS) and each execution span belongs
        to, read from the events' stats."""
        found = _Attribution(step=max(1, math.ceil(len(events.ops) / MAX_STAT_READS)))
        sampled: list[tuple[int, int]] = []  # (start, program id) of the events whose stats were read
        for index in range(0, len(events.ops), found.step):
            event, start, end, _ = events.ops[index]
            try:
                stats = decode(OpStats, dict(event.stats))
            except Exception:
                continue
            program_id = stats.program_id
            if program_id is None:
                continue
            run = stats.run_id if stats.run_id is not None else index
            if program_id not in self.key_of:
                found.unknown_modules.setdefault(stats.hlo_module, set()).add(run)
                continue
            found.runs.setdefault(program_id, set()).add(run)
            found.spans.setdefault(program_id, []).append((start, end))
            sampled.append((start, program_id))
            name = event.name
            found.seen[(program_id, name)] += 1
            if name in self.timers[program_id]:
                found.timer_ns[(program_id, name)] += end - start
        # An execution's span (its thunks and the bookkeeping between them, e.g. a loop's) belongs to
        # the program whose thunk runs inside it; one with no known thunk inside is unattributed.
        sampled.sort()
        starts = [start for start, _ in sampled]
        self._recovered(events, found, starts, sampled)
        found.unattributed = list(events.xla_spans)
        for start, end in events.executes:
            at = bisect.bisect_left(starts, start)
            if at < len(sampled) and sampled[at][0] <= end:
                found.spans.setdefault(sampled[at][1], []).append((start, end))
                found.attributed.append((start, end))
            else:
                found.unattributed.append((start, end))
        return found

    def _execution(self, program_id: int, run_ids: set[int], found: _Attribution) -> Executed:
        """One program's executions in the cell: how many, its CPU time, its loops' iterations."""
        from nbscope.collect.timeline import covered, union

        step = found.step
        return Executed(
            program=self.key_of[program_id],
            count=len(run_ids) if step == 1 else None,
            count_basis="trace" if step == 1 else "sampled",
            sampled_runs=len(run_ids) if step > 1 else None,
            cpu_s=covered(union(found.spans[program_id])) / 1e9 * step,
            loops=_observed_loops(
                self.loop_ops[program_id], program_id, found.seen, found.timer_ns, step, len(run_ids)
            ),
            from_run_ids=True,
        )

    def _transfers(
        self,
        h2d: list[tuple[int, int, int]],
        d2h: list[tuple[int, int]],
        calls: dict[int, list[tuple[int, int, str]]],
        work: list[tuple[int, int]],
    ) -> Transfers:
        from nbscope.collect.timeline import covered, union

        low = 0
        high: float = 0  # an int while no copy is bounded by its time (written 0, as ever)
        sized = unsized = 0
        by_function: dict[str, list[hlo.ProgramDescription]] = {}
        for program in self.programs.values():
            by_function.setdefault(_normal(program.function or ""), []).append(program)
        work_starts = [w[0] for w in work]
        for start, end, line_id in h2d:
            took = end - start
            at = bisect.bisect_left(work_starts, start)
            if at < len(work) and work[at][0] <= end + 1_000_000:  # the worker's copy, begun within 1 ms
                took = max(took, work[at][1] - work[at][0])
            function = None
            for call_start, call_end, name in calls.get(line_id, []):
                if call_start <= start and end <= call_end:
                    function = name
            candidates = by_function.get(_normal(function or ""), []) if function else []
            parameters = [b for p in candidates[-1:] for b in p.parameters_bytes if b > 0]
            # Only data that starts on the host is copied (a Python scalar, a NumPy array): arguments already
            # on the device are not. Which parameter a copy moved is not in the trace; it moved no more
            # than its CPU time allows, so a scalar copied beside a large device array stays small.
            most = took * HOST_COPY_BYTES_PER_NS
            if parameters:
                low += min(parameters)
                high += min(max(parameters), max(min(parameters), most))
                sized += 1
            else:
                high += most
                unsized += 1
        # On a CPU these copies are host work (a memcpy, or nothing when the buffer is shared): the
        # forecast takes their time out of the cell's host time and puts its own transfer term in.
        seconds = covered(union([(s, e) for s, e, _ in h2d] + d2h + work)) / 1e9
        return Transfers(
            host_to_device=len(h2d),
            device_to_host=len(d2h),
            sized=sized,
            unsized=unsized,
            bytes_low=low,
            bytes_high=high,
            cpu_s=seconds,
        )


_BOOKKEEPING = ("ThreadpoolListener", "end: ")
_EXECUTE = "ThunkExecutor::Execute"  # a program's thunks running, on whichever thread runs them


def _span(event: TraceEvent, shift: int = 0) -> tuple[int, int]:
    """An event's start and end (ns, plus its part's ``shift``); read only for the events kept (a trace may hold
    millions)."""
    start = int(event.start_ns) + shift
    return start, start + int(event.duration_ns)


_TASK_ENVIRONMENT = "Task Environment"  # a profiler session's plane of its own settings and start time
_END_MARK = "end: "  # XLA:CPU's marker as a thunk ends, beside the thunk's own event


def _profile_start(plane: TracePlane) -> int | None:
    """When the session whose ``Task Environment`` plane this is started (ns since the epoch), if it says."""
    for key, value in plane.stats:
        if key == "profile_start_time":
            try:
                return int(value)
            except (TypeError, ValueError):
                return None
    return None


def _is_xla_worker(name: str) -> bool:
    """A thread on which XLA:CPU runs programs (not its compiler's threads)."""
    return "XLA" in name and "Compiler" not in name and "codegen" not in name


@dataclass(frozen=True, slots=True)
class LoopKernels:
    """A loop's body kernels (their trace events count its iterations) and the thunk whose span times it."""

    body: frozenset[str]
    timer: str


def _loop_kernels(text: str) -> dict[str, LoopKernels]:
    """Per loop (keyed by its ``while``'s name, as ``hlo.describe`` keys loops): the kernels its body
    runs once per iteration (nested loops and branches excluded), whose trace events count iterations,
    and the thunk whose span times the loop: the ``while`` itself, or the small ``call`` XLA:CPU wraps
    a scalar loop in (then its iterations leave no events)."""
    module = hlo.parse(text)
    callers = {
        callee: i.name
        for c in module.computations.values()
        for i in c.instructions
        if i.opcode == "call"
        for callee in i.called
    }
    loops: dict[str, LoopKernels] = {}
    for name, computation in module.computations.items():
        for instruction in computation.instructions:
            if instruction.opcode != "while":
                continue
            body = module.computation(hlo.attribute(instruction, "body"))
            if body is None:
                continue
            kernels = frozenset(
                i.name
                for i in body.instructions
                if i.opcode not in hlo.NO_KERNEL and i.opcode not in ("while", "conditional")
            )
            loops[instruction.name] = LoopKernels(body=kernels, timer=callers.get(name, instruction.name))
    return loops


def _observed_loops(
    loop_ops: dict[str, LoopKernels],
    program_id: int,
    seen: Counter[tuple[int, str]],
    timer_ns: Counter[tuple[int, str]],
    step: int,
    runs: int,
) -> dict[str, LoopSeen]:
    """Per loop of a program: iterations per execution counted from its body's kernels in the trace
    (each runs at least once per iteration; the fewest events of them), and the time spent inside the
    loop."""
    found: dict[str, LoopSeen] = {}
    for loop, parts in loop_ops.items():
        entry = LoopSeen()
        counts = sorted(seen[(program_id, n)] * step for n in parts.body)
        counts = [c for c in counts if c]
        if counts and runs:
            # The least: XLA:CPU may split a large kernel into parallel tasks that each leave an event.
            entry.iterations = counts[0] / runs
        if (program_id, parts.timer) in timer_ns:
            entry.cpu_s = timer_ns[(program_id, parts.timer)] * step / 1e9
        if entry.iterations is not None or entry.cpu_s is not None:
            found[loop] = entry
    return found


def _kernel_names(text: str) -> set[str]:
    module = hlo.parse(text)
    fusion_bodies = {
        c for comp in module.computations.values() for i in comp.instructions if i.opcode == "fusion" for c in i.called
    }
    return {
        i.name
        for name, comp in module.computations.items()
        if name not in fusion_bodies
        for i in comp.instructions
        if i.opcode not in hlo.NO_KERNEL
    }


def _place(loop: hlo.LoopDescription, cells: list[CodeCell], current: int | None) -> None:
    """What the loop is in the notebook's words: the call that made it (``lax.scan(...)``), its cell and
    line, and the loop primitive named there; else what the HLO says (counted or not)."""
    source = loop.source
    if source is not None and source.line:
        function = source.function or ""
        line = source.line
        candidates: list[CodeCell] = []
        if function and not function.startswith("<"):
            short = function.rsplit(".", 1)[-1]
            candidates = [c for c in cells if re.search(rf"\bdef\s+{re.escape(short)}\b", c.source)]
            if current is not None:
                earlier = [c for c in candidates if c.index <= current]
                candidates = earlier or candidates
        elif current is not None:
            candidates = [c for c in cells if c.index == current]
        for cell in reversed(candidates):
            lines = cell.source.splitlines()
            if 0 < line <= len(lines):
                text = lines[line - 1]
                column, end = source.column, source.end_column
                if column is not None and end is not None and source.end_line == line and end > column:
                    text = text[column:end]
                loop.call = shorten(text.strip(), 200)
                loop.cell = cell.index
                loop.cell_line = line
                match = _LOOP_CALL.search(text)
                if match:
                    loop.kind = f"lax.{match.group(1)}"
                else:  # a loop a library call made (jax.random's threefry rounds, a solver's iterations)
                    loop.kind = f"loop inside {shorten(text.strip(), 80)}"
                break


def _remove(path: str | None) -> None:
    with contextlib.suppress(OSError):
        if path and Path(path).is_file():
            Path(path).unlink()
