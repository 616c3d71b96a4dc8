"""The typed model of a notebook run (``profile`` and ``trace`` records): the run's cells with their JAX and
Numba figures, its totals and its notebook, as read-only objects with typed attributes.

Why dataclasses: they are in the standard library, so reading a record costs no import (typer is pinned below
0.17 because pydantic's import alone broke ``nbscope info``'s start-up budget), they are frozen and slotted
(a record read from the store cannot be changed by a reader), and the validation they need is already done
once, at load, by ``schema.validate`` (field names in every error). attrs would add a dependency for
nothing we use; pydantic would add its import and a second validator.

``schema.codec.decode`` builds these from the validated JSON document, by their annotations (``RunRecord``
does it once per loaded record); the document stays the one thing stored and exported (``dict[str, Any]``
only at that boundary). A field a record of an earlier version lacks reads as ``None`` (unknown), never as a
guess.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

from nbscope._redact import shorten
from nbscope.schema import _fields
from nbscope.schema.codec import MAX_CELLS, Check, Count, Index, Read, Repeat, Seconds, Time, step
from nbscope.schema.memory import Bytes, MemoryReading
from nbscope.schema.programs import CellPrograms, Program, ProgramData
from nbscope.schema.status import CELL_STATUSES, RAN
from nbscope.schema.timeline import TimelineSummary
from nbscope.schema.trial import TrialFigures

MAX_DEVICES = 1_000_000  # JAX devices one process sees (a TPU pod's chips are thousands)


def _cell_status(status: str) -> str | None:
    return None if status in CELL_STATUSES else f"is {shorten(status, 40)!r}, not one of {', '.join(CELL_STATUSES)}"


def _lines(value: object) -> str | None:
    found = _fields.line_range(value)
    return (
        None
        if found is not None and 0 <= found[0] <= found[1]
        else f"is {shorten(str(value), 40)}, not a first and last line"
    )


@dataclass(frozen=True, slots=True)
class CellError:
    name: str
    message: str


class CompileStages(Protocol):
    """JAX's three stages of a compile, as the probe times them."""

    @property
    def trace_s(self) -> float: ...
    @property
    def lower_s(self) -> float: ...
    @property
    def backend_s(self) -> float: ...


def compile_seconds(stages: CompileStages) -> float:
    """A compile's seconds, JAX's trace, lowering and backend compile: the one sum of them outside the kernel."""
    return stages.trace_s + stages.lower_s + stages.backend_s


@dataclass(frozen=True, slots=True)
class JaxFunction:
    """One function JAX compiled in a cell: how often, how long each stage took, for which argument shapes."""

    name: str
    kind: str | None  # user, eager, library
    count: Count
    cache_hits: Count
    trace_s: Seconds
    lower_s: Seconds
    backend_s: Seconds
    shapes: tuple[str, ...]
    caller: str | None

    @property
    def compile_s(self) -> float:
        return compile_seconds(self)

    @property
    def compiles(self) -> int:
        """Real compiles: events less persistent-cache hits."""
        return max(0, self.count - self.cache_hits)


@dataclass(frozen=True, slots=True)
class JaxFigures:
    """A cell's JAX compile events, summed, and per function."""

    compiles: Count
    user_compiles: Count
    eager_compiles: Count
    library_compiles: Count
    cache_hits: Count
    cache_misses: Count
    trace_s: Seconds
    lower_s: Seconds
    backend_s: Seconds
    cache_state: str | None
    functions: tuple[JaxFunction, ...]
    cache_retrieval_s: Time = None  # reading compiled programs from JAX's persistent cache

    @property
    def compile_s(self) -> float:
        return compile_seconds(self)

    def refuse(self) -> tuple[str, str] | None:
        """Compiles by kind that outnumber the compiles (each is one of them, or a persistent-cache hit)."""
        parts = self.user_compiles + self.eager_compiles + self.library_compiles
        if parts > self.compiles + self.cache_hits:
            return ".compiles", f"is {self.compiles}, fewer than the {parts} it counts by kind (user, eager, library)"
        return None

    def of_kind(self, kind: str) -> tuple[JaxFunction, ...]:
        return tuple(f for f in self.functions if f.kind == kind)


@dataclass(frozen=True, slots=True)
class NumbaFunction:
    name: str
    signature: str | None
    seconds: Seconds
    module: str | None
    cache: bool | None


@dataclass(frozen=True, slots=True)
class NumbaFigures:
    compiles: Count
    compile_s: Seconds
    functions: tuple[NumbaFunction, ...]


@dataclass(frozen=True, slots=True)
class CpuTime:
    """What the probe saw of a cell on the CPU (``sched``, Linux): its own thread's time on a CPU and waiting
    for one, and every thread of the kernel's CPU time. Each is None when not a plausible time."""

    on_cpu_s: Time
    wait_s: Time
    cpu_s: Time


@dataclass(frozen=True, slots=True)
class Samples:
    """Each repeat's figures of a cell run more than once (``--repeat N``)."""

    wall_s: tuple[Seconds, ...]
    code_s: tuple[Seconds, ...]
    compile_s: tuple[Seconds, ...]
    status: tuple[str | None, ...]
    wait_s: tuple[Time, ...] = ()  # each repeat's wait for a CPU, beside its wall (empty: not recorded)


@dataclass(frozen=True, slots=True)
class Cell:
    """One code cell of a run: what ran (its source and where it sits) and what it cost."""

    index: Index  # among the notebook's code cells, from 0
    cell_index: Annotated[int | None, Check(0, MAX_CELLS, "cell index")]  # among all its cells
    source_hash: str
    source: str | None  # the code that ran (None: a record of schema version 1)
    line: int | None
    # first and last line in its file (None: a record of schema version 1)
    lines: Annotated[tuple[int, int] | None, Read(_fields.line_range), Check(rule=_lines)]
    first_line: str
    code_line: str
    tags: tuple[str, ...]
    status: Annotated[str, Read(otherwise="ok"), Check(rule=_cell_status)]
    error: CellError | None
    execution_count: int | None
    wall_s: Time
    code_s: Time
    roundtrip_s: Time
    compile_s: Time
    run_s: Time
    overhead_s: Time
    compile_share: Annotated[float | None, Check(0, 1, "share")]
    spread: Annotated[float | None, Check(0, math.inf, "spread")]
    jax: JaxFigures | None
    numba: NumbaFigures | None
    samples: Samples | None
    # The timeline summary (``profile --timeline``) as recorded, which a finding's evidence quotes, and typed
    # (None: the cell was not traced)
    timeline: Mapping[str, Any] | None
    timeline_summary: Annotated[TimelineSummary | None, Read(key="timeline")]
    programs: CellPrograms | None  # the compiled programs the cell ran (program data; None: not recorded)
    alarms: tuple[str, ...]  # what XLA printed to stderr (slow compile, constant folding)
    rss: MemoryReading  # the kernel's resident memory at the cell's start and end, and its peak
    gpu_memory: MemoryReading  # the kernel's GPU memory (NVML), at the cell's start and end
    # the accelerator memory JAX's allocator held (TPU or GPU): start, end, and the cell's peak where it set one
    device_memory: MemoryReading = MemoryReading(None, None, None)  # none read: no accelerator, or an older record
    sched: CpuTime | None = None  # the cell's thread on a CPU and waiting for one (Linux)
    interrupted_by: str | None = None  # the signal that stopped an interrupted cell (SIGINT, SIGTERM)
    output_bytes: int | None = None  # what the cell sent to its outputs
    # nbscope's own collection after the cell's code (--forecast: session stop, HLO, lowering for CUDA), inside
    # wall_s; None: not recorded (no --forecast, or a record older than the field)
    collection_s: Time = None
    collection: Annotated[Mapping[str, float] | None, Read(_fields.times)] = (
        None  # its parts: session_stop_s, hlo_s, lowering_s (cut_stop_s apart)
    )
    started_unix: float | None = None  # when the probe saw the cell start, on the kernel's clock (None: not seen)
    skip_reason: str | None = None  # why a pathway's runner did not run the cell (the script pathway); None: it ran

    @staticmethod
    def reshape(value: Mapping[str, Any]) -> Mapping[str, Any]:
        """A cell recorded before ``code_line`` shows its first line there."""
        return value if value.get("code_line") else {**value, "code_line": value.get("first_line")}

    def refuse(self) -> tuple[str, str] | None:
        """A compile longer than the cell (JAX and Numba compile inside it; 1 % and 10 ms for two clocks)."""
        if self.compile_s is not None and self.wall_s is not None and self.compile_s > self.wall_s * 1.01 + 0.01:
            return ".compile_s", f"is {self.compile_s:g} s, longer than the cell's {self.wall_s:g} s (wall_s)"
        return None

    @property
    def notebook_wall_s(self) -> float | None:
        """``wall_s`` less nbscope's own collection: what the notebook's cell itself took."""
        return _fields.without_collection(self.wall_s, self.collection_s)

    @property
    def in_flight_wait_s(self) -> float:
        """Seconds the cell waited as it started, before its session, for programs an earlier cell dispatched
        (``collection.in_flight_wait_s``, --forecast): JAX time within its wall that no trace of it saw."""
        collection = self.collection or {}
        return collection.get("in_flight_wait_s", 0.0)

    @property
    def ran(self) -> bool:
        """It came to an end, cleanly or not (``schema.status.RAN``): not interrupted, skipped or left unrun."""
        return self.status in RAN

    @property
    def label(self) -> str:
        """``cell 3 (line 41)``: the cell's number as a reader counts code cells, and its line when known."""
        return f"cell {self.index + 1} (line {self.line})" if self.line else f"cell {self.index + 1}"


def _cells_refused(cells: tuple[Cell, ...]) -> tuple[str, str] | None:
    """What each cell's parts' own ``refuse`` finds wrong (``NotebookRun.refuse``, on what the decode read once)."""
    for at, cell in enumerate(cells):
        checked = {"": cell, ".jax": cell.jax, ".rss": cell.rss, ".device_memory": cell.device_memory}
        for part, found in ((p, value.refuse()) for p, value in checked.items() if value is not None):
            if found is not None:
                return f".cells[{at}]{part}{found[0]}", found[1]
    return None


@dataclass(frozen=True, slots=True)
class Totals:
    """A run's notebook-level figures (what ``nbscope runs`` lists)."""

    wall_s: Time
    compile_s: Time
    run_s: Time
    cells: Count
    cells_run: Count
    cells_ok: Count
    cells_failed: Count
    compiles: Count
    user_compiles: Count
    eager_compiles: Count
    library_compiles: Count
    numba_compiles: Count
    cache_hits: Count
    cache_misses: Count
    cache_state: str | None
    kernel_start_s: Time
    peak_rss_bytes: Annotated[float | None, Check(0, math.inf, "size")]
    numba_compile_s: Time = None  # typed for the check (``history --metric`` reads totals by name)
    cache_retrieval_s: Time = None
    execute_s: Time = None
    # a warm-cache run's saving against the cold run it was measured against (None: not a warm run)
    cache_saving_s: float | None = None
    cache_baseline_run: Annotated[str | None, Read(_fields.name)] = None
    cold_compiles: int | None = None
    # the figures the record carries, in its order: a count it lacks reads as 0 above, and is unknown
    recorded: tuple[str, ...] = ()

    @staticmethod
    def reshape(value: Mapping[str, Any]) -> Mapping[str, Any]:
        return {**value, "recorded": list(value)}


@dataclass(frozen=True, slots=True)
class NotebookInfo:
    path: str | None
    format: str | None  # ipynb or myst
    kernel: str | None
    content_hash: str | None


@dataclass(frozen=True, slots=True)
class RunnerInfo:
    """How the notebook ran, as the runner saw it from outside the kernel (``measurements.runner``:
    ``collect.runner`` for a profile, ``api.trace`` for a traced command). ``None``: not recorded."""

    pathway: str | None = None  # kernel (a profile), trace
    transport: str | None = None  # the kernel's ZMQ transport: tcp, or ipc where no loopback TCP works
    kernel_start_s: Time = None  # spawning the kernel until it answered
    execute_s: Time = None  # the cells, one after another, as nbclient ran them
    shutdown_s: Time = None
    total_s: Time = None
    kernel_restarts: Count = 0  # a kernel that died before its first reply gets one more start
    interrupt_ignored: int | None = None  # the index of a timed-out cell that ignored the interrupt
    kernel_log_tail: str | None = None  # what the kernel printed last, kept for a run that did not end ok
    recovered_from: str | None = None  # the live file a recovered run was read from
    command: tuple[str, ...] = ()  # trace: the command that ran the notebooks
    command_wall_s: Time = None
    returncode: int | None = None
    interrupted: str | None = None  # trace: the signal that stopped the command
    oom_kill: OomKillInfo | None = None  # the kernel died while Linux counted an OOM kill where it ran


@dataclass(frozen=True, slots=True)
class OomKillInfo:
    """An OOM kill Linux counted while the kernel died (``collect.oom``): the kernel was killed for memory."""

    where: str | None = None  # the memory cgroup that counted it, or "the machine"
    kills: int | None = None
    limit_bytes: int | None = None  # the lowest memory limit over the kernel's cgroups; None: none set


@dataclass(frozen=True, slots=True)
class JaxBackend:
    """The backend JAX used in the kernel, as the probe read it once the notebook had started it."""

    platform: str | None  # cpu, tpu, cuda, rocm
    device_kind: str | None  # "TPU v5 lite", "Tesla T4"
    devices: Annotated[int | None, Check(1, MAX_DEVICES, "device count")]
    memory_bytes_per_device: Bytes  # what JAX's allocator may use on one device
    platform_version: str | None = None
    jax: str | None = None
    jaxlib: str | None = None


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """The kernel the notebook ran in, as the probe described it on loading (``measurements.kernel``)."""

    probe_version: int | None
    pid: int | None
    cwd: str | None
    python: str | None  # its version, ``3.11.9``
    executable: str | None  # its interpreter
    started_unix: float | None
    session: str | None
    jax_cache_dir: str | None  # JAX_COMPILATION_CACHE_DIR in the kernel's environment
    jax_platforms: str | None  # JAX_PLATFORMS in the kernel's environment
    jax_backend: JaxBackend | None = None  # what JAX ran on there (None: the notebook never started JAX)


@dataclass(frozen=True, slots=True)
class NotebookRun:
    """The measurements of a ``profile`` or ``trace`` record, typed."""

    notebook: NotebookInfo
    cells: tuple[Cell, ...]
    totals: Totals
    repeats: Repeat
    program_data: Annotated[
        ProgramData | None, Read(key="programs")
    ]  # the compiled programs the run executed (None: recorded without them)
    runner: RunnerInfo = field(default_factory=RunnerInfo)
    kernel: KernelInfo | None = None  # None: the probe never described its kernel (it did not load)
    run_uuid: str | None = None  # the run's identity, as its live file's header has it (None: recorded without one)
    live_file: str | None = None  # the live file the run wrote as it went (None: none kept)
    recovered_from: str | None = None  # the live file a recovered run was read from
    # each repeat's runner (``--repeat N``; empty: one run); an entry that is not an object stays in its place, as None
    repeat_runners: tuple[RunnerInfo | None, ...] = ()
    cells_recorded: bool = True  # False: the record holds no list of cells (not an empty notebook: no cell figures)
    trial: TrialFigures | None = None  # a trial's judgement, on its remedy side (``schema.trial``)

    @staticmethod
    def reshape(value: Mapping[str, Any]) -> Mapping[str, Any]:
        return {**value, "cells_recorded": isinstance(value.get("cells"), list)}

    def refuse(self) -> tuple[str, str] | None:
        """What ``codec.strict`` refuses of a run as a whole: cells not each once in notebook order, totals that
        count other cells than it lists (when it lists any), a loop whose parent is no loop, or a cycle of them."""
        for at, (before, cell) in enumerate(itertools.pairwise(self.cells), 1):
            if cell.index <= before.index:
                return (
                    f".cells[{at}].index",
                    f"is {cell.index}, not after cells[{at - 1}]'s {before.index}: "
                    "each code cell once, in notebook order",
                )
        if (found := _cells_refused(self.cells)) is not None:
            return found
        totals, counted = self.totals, len(self.cells)
        if counted and "cells" in totals.recorded and totals.cells != counted:
            return ".totals.cells", f"is {totals.cells}, but the run lists {counted} cells"
        jax = [c.jax for c in self.cells if c.jax is not None]  # (totals of a run whose cells carry no JAX figures)
        for name in ("compiles", "user_compiles", "eager_compiles", "library_compiles") if jax else ():
            if (total := getattr(totals, name)) > (summed := sum(getattr(figures, name) for figures in jax)):
                return f".totals.{name}", f"is {total}, more than its cells' {summed}"
        parts = {"cells_run": totals.cells_run, "cells_ok + cells_failed": totals.cells_ok + totals.cells_failed}
        for name, count in parts.items():
            if count > totals.cells and "cells" in totals.recorded:
                return (
                    f".totals.{name.partition(' ')[0]}",
                    f"counts {count} of {name}, more than the run's {totals.cells} cells",
                )
        for key, program in self.program_data.programs.items() if self.program_data else ():
            parents = {loop.id: loop.parent for loop in program.loops}  # readers walk up: no chain may come back
            for chain, parent in (([loop_id], parent) for loop_id, parent in parents.items()):
                while parent is not None:
                    where = f".programs.programs.{step(key)}.loops"
                    if parent not in parents:
                        return (
                            where,
                            f"loop {shorten(chain[-1], 60)!r} has parent {shorten(parent, 60)!r}, which is no loop of its program",
                        )
                    if parent in chain:
                        return (
                            where,
                            f"the loops' parents form a cycle ({' -> '.join(shorten(c, 40) for c in [*chain, parent])})",
                        )
                    chain, parent = [*chain, parent], parents[parent]
        return None

    @property
    def sources(self) -> dict[str, str]:
        """The code that ran, by source hash (cells of a version-1 record carry none)."""
        return {c.source_hash: c.source for c in self.cells if c.source is not None}

    def cell(self, index: int) -> Cell | None:
        return next((c for c in self.cells if c.index == index), None)

    def program(self, key: str) -> Program | None:
        """The program of the run's table under ``key`` (what an execution names); None: the run recorded no
        such program (no table, or one without it: a forecast names it missing)."""
        return self.program_data.programs.get(key) if self.program_data is not None else None

    @property
    def runtime_start(self) -> Cell | None:
        """The cell that opened JAX's accelerator runtime, once per kernel (on a TPU v5e: the chip, its HBM and
        ~13 GB of host memory, 5-8 s of the cell beyond compile): the first whose end found JAX's backend started
        on a device (its memory was read), else the first that compiled. None when JAX ran on the CPU."""
        backend = self.kernel.jax_backend if self.kernel is not None else None
        if backend is None or backend.platform in (None, "cpu"):
            return None
        opened = (c for c in self.cells if c.device_memory.after_bytes is not None)
        return next(opened, None) or next((c for c in self.cells if c.jax is not None and c.jax.compiles), None)
