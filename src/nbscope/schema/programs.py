"""The typed model of a run's program data (``profile --forecast`` / ``--programs``): the compiled XLA programs
the run executed, and per cell which of them ran, how often and for how long.

Two places of a record hold it, both written by ``collect.program`` (the programs described by
``collect.hlo.describe``) and documented in docs/run-record.md, "Program data":

* ``measurements.programs``: :class:`ProgramData`, the run's table of programs (:class:`Program`: its entry
  computation's work and kernels, its loops with their trip counts and syncs, its work per execution, its CUDA
  lowering), keyed ``<module>#<program id>``;
* each cell's ``programs``: :class:`CellPrograms`, the programs the cell executed (:class:`Execution`, with
  what its trace showed of their loops), the host↔device copies it made, and how its trace was taken.

Read-only dataclasses over the validated document, like ``schema.model`` (see its docstring for why
dataclasses), which reads a cell's and a run's program data with these. A field a record lacks reads as
``None`` (unknown), never as a guess: a program whose trip count is unknown says ``None``, not 1.

``schema.codec.decode`` reads them by their annotations, as every other typed view.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any, Self

from nbscope.schema.codec import Check, Time, given

Many = Annotated[int | None, Check()]  # how many of something; None: not recorded
Trips = Annotated[float | None, Check(noun="trip count")]  # iterations of a loop seen run (kernels counted)
Amount = Annotated[float | None, Check(0, math.inf, "size or factor")]  # bytes, a rate, a factor: never negative
# XLA's cost analysis gives -1 for a figure it cannot count (jax-ml/jax#16008, #20184): unknown, and kept as recorded
Cost = Annotated[float | None, Check(0, math.inf, refused=False)]

__all__ = [
    "CallRate",
    "CellPrograms",
    "CollectTimes",
    "Entry",
    "Execution",
    "GpuLowering",
    "Loop",
    "ObservedLoop",
    "PerExecution",
    "Program",
    "ProgramData",
    "SourceSpan",
    "TraceWindow",
    "Transfers",
    "Work",
]


# ---- a program -------------------------------------------------------------------------------------

WORK_FIELDS = ("flops", "transcendentals", "bytes", "flops_f64", "transcendentals_f64")


@dataclass(frozen=True, slots=True)
class Work:
    """Work of some code: flops, transcendentals and bytes accessed, and of the flops and transcendentals the
    float64 (or complex128) ones."""

    flops: Cost
    transcendentals: Cost
    bytes: Cost
    flops_f64: Cost
    transcendentals_f64: Cost

    def plus(self, other: Work, times: float = 1.0) -> Self:
        """This work and ``times`` times ``other`` (an unknown figure adds as none), of this one's type."""
        return replace(
            self, **{name: (getattr(self, name) or 0.0) + (getattr(other, name) or 0.0) * times for name in WORK_FIELDS}
        )


@dataclass(frozen=True, slots=True)
class Entry(Work):
    """A program's entry computation: its own work (loops excluded), the kernels it launches and its
    conditionals."""

    kernels: Many
    conditionals: Many


@dataclass(frozen=True, slots=True)
class PerExecution(Work):
    """The work of one execution, loop bodies multiplied by their iterations."""

    complete: bool | None  # False: a trip count is unknown, and its loop counts one iteration (a lower bound)


@dataclass(frozen=True, slots=True)
class SourceSpan:
    """Where in the code a loop was made: the file, function, lines and columns of the call."""

    file: str | None
    function: str | None
    line: int | None
    end_line: int | None
    column: int | None
    end_column: int | None


@dataclass(frozen=True, slots=True)
class Loop:
    """One HLO ``while`` of a program: how often it runs, what one iteration costs, and what made it."""

    id: str  # the while instruction's name, unique in its program
    parent: str | None  # the enclosing loop's id; None: in the entry computation
    # static (XLA's known_trip_count, an int64); None: known only at run time
    trip_count: Annotated[int | None, Check(0, 2**63 - 1, "trip count")]
    trip_count_source: str | None
    outer_iterations: Annotated[float | None, Check(0, math.inf, "trip count")]  # the enclosing loops' (None: unknown)
    kernels_per_iteration: Many
    conditionals_per_iteration: Many
    select_conds: Many  # instructions of a cond that XLA:CPU turned into a select
    syncs_per_iteration: Many  # waits for the host per iteration on XLA:GPU
    per_iteration: Work
    source: SourceSpan | None
    op_name: str | None
    body: str | None  # the body computation's name
    call: str | None  # the call's text in the notebook (``lax.scan(step, x0, xs)``)
    cell: int | None  # the code cell of that call
    cell_line: int | None  # its line in that cell
    kind: str | None  # lax.scan, lax.fori_loop, lax.while_loop, "loop inside ..."
    cpu_only: bool | None  # only XLA:CPU builds it (no loop of the CUDA lowering); None: no lowering read
    trip_cap: int | None = None  # the most iterations its condition allows (trip count known only at run time)


@dataclass(frozen=True, slots=True)
class GpuLowering:
    """What a program would run on a GPU, from its lowering for CUDA (in the kernel, no GPU needed)."""

    source: str | None  # "lower (cuda)"; "jax.export (cuda)" in older records
    loops: int | None  # the lowering's while loops
    custom_calls: Mapping[str, int]  # by target (``cusolver_getrf_ffi``)
    conditionals: int | None
    seconds: float | None  # the lowering's own time
    note: str | None  # why it was skipped
    error: str | None  # why it failed


@dataclass(frozen=True, slots=True)
class TargetModule:
    """What a TPU would compile of a program, kept by the kernel; ``collect.target_compile`` compiles it."""

    how: str | None  # "cpu module" (the module XLA:CPU compiled, which JAX lowers alike for the TPU), "lowered for tpu"
    module: str | None  # its StableHLO bytecode, zlib-compressed, base64
    lowering_error: str | None  # JAX could not lower it for the TPU: the error (what the chip would raise)


@dataclass(frozen=True, slots=True)
class TargetCompile:
    """One program compiled by XLA:TPU for the target chip on the machine at hand (``collect.target_compile``)."""

    compile_s: Time  # the compile's wall time here
    compile_cpu_s: Time  # its CPU time (every thread's): what the forecast scales, as a busy machine stretches the wall
    flops: float | None  # XLA:TPU's cost analysis: the operations the chip runs (float64 emulated), loops' known trips
    bytes: float | None  # memory traffic
    transcendentals: float | None
    optimal_s: Time  # the compiler's estimate of its run time, where it gives one
    device_bytes: Many  # device memory: arguments, outputs, temporaries and code
    error: str | None  # the compiler's (or JAX's lowering's) refusal, whole


@dataclass(frozen=True, slots=True)
class Program:
    """One compiled program the run executed, described from its optimised HLO."""

    key: str | None  # ``<module>#<program id>``, its key in the run's table
    module: str | None  # the HLO module (``jit_qm_jax``)
    program_id: int | None  # per kernel
    function: str | None  # the jitted function (``qm_jax``)
    kind: str | None  # user, eager, library (from the compile events), or unknown
    first_cell: int | None  # the code cell that first ran it
    entry: Entry
    loops: tuple[Loop, ...]
    per_execution: PerExecution
    float_dtypes: tuple[str, ...]  # f32, f64, ...
    cost_source: str | None  # xla-cost-analysis or estimate
    parameters_bytes: tuple[Annotated[int, Check(0, math.inf, "size")], ...]  # each entry parameter's size
    output_bytes: Many
    gpu: GpuLowering | None  # None: not lowered for CUDA
    target: TargetModule | None = None  # None: the kernel kept no module of it (an older probe, the first compile)


@dataclass(frozen=True, slots=True)
class ProgramData:
    """A run's ``measurements.programs``: its programs by key, where their work figures come from, and notes
    on what could not be read."""

    version: int | None
    programs: Mapping[str, Program]
    cost_source: str | None  # xla-cost-analysis or estimate; None: no HLO was read
    notes: tuple[str, ...]

    present = staticmethod(given)  # an empty table is no program data


# ---- a cell's executions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObservedLoop:
    """What a cell's trace showed of one loop of a program it executed."""

    iterations: Trips  # per execution, counted from the body's kernels
    cpu_s: Time  # inside the loop, over all the cell's executions
    basis: str | None = None  # "re-run": counted in a sampled call run again with counters (else the trace's kernels)


@dataclass(frozen=True, slots=True)
class Execution:
    """One program's executions in a cell: how many, on what basis, and its CPU time."""

    program: str  # its key in the run's table (``ProgramData.programs``)
    count: Many  # None: sampled (see ``sampled_runs``)
    count_basis: str | None  # trace, sampled, device trace, compiled, extrapolated
    sampled_runs: Many  # the runs seen when the trace was sampled
    traced_count: Many  # the runs seen in a trace cut short (``count`` is then extrapolated)
    cpu_s: Time  # union of its XLA:CPU thunks; None: not timed (compiled, device trace)
    loops: Mapping[str, ObservedLoop]  # by loop id
    synced: Many = None  # of ``count``: calls the host waited for (read a result, or blocked) before the next one

    @property
    def runs(self) -> int:
        """How many times it ran: the count, else the runs a sampled trace saw (at least that many), else once."""
        if self.count is not None:
            return self.count
        return self.sampled_runs or 1

    @staticmethod
    def present(value: Mapping[str, Any]) -> bool:
        """An entry that names no program is nothing to read against the table."""
        return bool(value.get("program")) and isinstance(value.get("program"), str)


@dataclass(frozen=True, slots=True)
class Transfers:
    """A cell's host↔device copies, counted in its trace; bytes bounded by the parameters of the call that made
    them (``unsized``: copies outside a call, bounded only by their time)."""

    host_to_device: Many
    device_to_host: Many
    sized: Many
    unsized: Many
    bytes_low: Amount
    bytes_high: Amount
    cpu_s: Time  # the time they took on this CPU


@dataclass(frozen=True, slots=True)
class TraceWindow:
    """A trace the probe cut short (its memory budget, a flood of events, its parts or their time): what it
    covered, and the factor its figures were extrapolated by to the whole cell."""

    cut: bool | None
    traced_s: Time  # how long the session ran
    grown_bytes: int | None  # what it had grown by then
    reason: str | None  # the rule that cut it: "memory budget" (the kernel's), "early", "trace budget", "heap cap",
    # "events flood", "parts" (the probe's MAX_PARTS), "split time" (its MAX_SPLIT_S)
    kernel_grown_bytes: int | None  # the kernel's resident growth since the session started, at the cut
    wait_s: Time  # how long the cell's thread waited for a CPU in it
    stop_s: Time  # how long stopping it took
    cell_s: Time  # the cell's time
    scale: Amount  # the factor the counts, CPU and busy times and transfers were multiplied by
    compile_s: Time = None  # JAX's compile seconds in the cell before the cut (None: not recorded)


@dataclass(frozen=True, slots=True)
class CallRate:
    """The jitted calls a cut trace saw, and their rate over its later half (what the extrapolation used)."""

    calls: Many
    late_calls: Many
    late_s: Time
    late_per_s: Amount


@dataclass(frozen=True, slots=True)
class CollectTimes:
    """What collecting a cell's program data cost, in the kernel after the cell's timed code."""

    trace_stop_s: Time  # stopping and writing its profiler session
    programs_s: Time  # collecting the HLO after a compiling cell
    gpu_lowering_s: Time  # lowering its new programs for CUDA


@dataclass(frozen=True, slots=True)
class CellPrograms:
    """A cell's ``programs``: the programs it executed, its copies, and how its trace was read."""

    executions: tuple[Execution, ...]
    transfers: Transfers | None
    sampled: bool | None  # the trace's stats were read for every k-th event only
    trace: str | None  # "read", or why the cell has no trace
    new_programs: tuple[str, ...]  # programs first seen (compiled or loaded) in this cell
    cpu_busy_s: Time  # union of all program thunks
    xla_busy_s: Time  # all of XLA:CPU's work, attributed to a known program or not
    window: TraceWindow | None  # only for a trace cut short
    call_rate: CallRate | None  # only with ``window``
    uncaptured: Mapping[str, int]  # programs that ran but whose HLO was not captured, by module: runs seen
    hlo_error: str | None  # why the cell's HLO could not be collected
    error: str | None  # why the cell's program data could not be read at all (``nbscope trace``)
    collect_s: CollectTimes | None
    counted: bool | None = None  # every execution was counted by the probe: ``executions`` are all that ran
