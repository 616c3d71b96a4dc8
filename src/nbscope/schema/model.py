"""The typed model of a notebook run (``profile`` and ``trace`` records): the run's cells with their JAX and
Numba figures, its totals and its notebook, as read-only objects with typed attributes.

Why dataclasses: they are in the standard library, so reading a record costs no import (typer is pinned below
0.17 because pydantic's import alone broke ``nbscope info``'s start-up budget), they are frozen and slotted
(a record read from the store cannot be changed by a reader), and the validation they need is already done
once, at load, by ``record.run.validate`` (field names in every error). attrs would add a dependency for
nothing we use; pydantic would add its import and a second validator.

``RunRecord.profile()`` builds this view from the validated JSON document; the document stays the one thing
stored and exported (``dict[str, Any]`` only at that boundary). A field a record of an earlier version lacks
reads as ``None`` (unknown), never as a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbscope.schema._fields import mapping as _object
from nbscope.schema._fields import number as _number
from nbscope.schema._fields import text as _text
from nbscope.schema._fields import time as _time
from nbscope.schema._fields import times as _times
from nbscope.schema._fields import without_collection
from nbscope.schema.programs import CellPrograms, ProgramData


def _count(value: Any) -> int:
    number = _number(value)
    return int(number) if number is not None else 0




def _line_range(value: Any) -> tuple[int, int] | None:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return (value[0], value[1])
    return None




def _integer(value: Mapping[str, Any], key: str) -> int | None:
    item = value.get(key)
    return item if isinstance(item, int) and not isinstance(item, bool) else None


@dataclass(frozen=True, slots=True)
class CellError:
    name: str
    message: str

    @classmethod
    def parse(cls, value: Any) -> CellError | None:
        if not isinstance(value, Mapping):
            return None
        return cls(name=str(value.get("name") or ""), message=str(value.get("message") or ""))


@dataclass(frozen=True, slots=True)
class JaxFunction:
    """One function JAX compiled in a cell: how often, how long each stage took, for which argument shapes."""

    name: str
    kind: str | None  # user, eager, library
    count: int
    cache_hits: int
    trace_s: float
    lower_s: float
    backend_s: float
    shapes: tuple[str, ...]
    caller: str | None

    @property
    def compile_s(self) -> float:
        return self.trace_s + self.lower_s + self.backend_s

    @property
    def compiles(self) -> int:
        """Real compiles: events less persistent-cache hits."""
        return max(0, self.count - self.cache_hits)

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> JaxFunction:
        return cls(
            name=str(value.get("name")), kind=_text(value.get("kind")), count=_count(value.get("count")),
            cache_hits=_count(value.get("cache_hits")), trace_s=_number(value.get("trace_s")) or 0.0,
            lower_s=_number(value.get("lower_s")) or 0.0, backend_s=_number(value.get("backend_s")) or 0.0,
            shapes=tuple(str(s) for s in value.get("shapes") or ()), caller=_text(value.get("caller")),
        )


@dataclass(frozen=True, slots=True)
class JaxFigures:
    """A cell's JAX compile events, summed, and per function."""

    compiles: int
    user_compiles: int
    eager_compiles: int
    library_compiles: int
    cache_hits: int
    cache_misses: int
    trace_s: float
    lower_s: float
    backend_s: float
    cache_state: str | None
    functions: tuple[JaxFunction, ...]
    cache_retrieval_s: float | None = None  # reading compiled programs from JAX's persistent cache

    @property
    def compile_s(self) -> float:
        return self.trace_s + self.lower_s + self.backend_s

    def of_kind(self, kind: str) -> tuple[JaxFunction, ...]:
        return tuple(f for f in self.functions if f.kind == kind)

    @classmethod
    def parse(cls, value: Any) -> JaxFigures | None:
        if not isinstance(value, Mapping):
            return None
        return cls(
            compiles=_count(value.get("compiles")), user_compiles=_count(value.get("user_compiles")),
            eager_compiles=_count(value.get("eager_compiles")), library_compiles=_count(value.get("library_compiles")),
            cache_hits=_count(value.get("cache_hits")), cache_misses=_count(value.get("cache_misses")),
            trace_s=_number(value.get("trace_s")) or 0.0, lower_s=_number(value.get("lower_s")) or 0.0,
            backend_s=_number(value.get("backend_s")) or 0.0, cache_state=_text(value.get("cache_state")),
            functions=tuple(JaxFunction.parse(f) for f in value.get("functions") or () if isinstance(f, Mapping)),
            cache_retrieval_s=_time(value.get("cache_retrieval_s")),
        )


@dataclass(frozen=True, slots=True)
class NumbaFunction:
    name: str
    signature: str | None
    seconds: float
    module: str | None
    cache: bool | None

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> NumbaFunction:
        cache = value.get("cache")
        return cls(name=str(value.get("name")), signature=_text(value.get("signature")),
                   seconds=_number(value.get("seconds")) or 0.0, module=_text(value.get("module")),
                   cache=cache if isinstance(cache, bool) else None)


@dataclass(frozen=True, slots=True)
class NumbaFigures:
    compiles: int
    compile_s: float
    functions: tuple[NumbaFunction, ...]

    @classmethod
    def parse(cls, value: Any) -> NumbaFigures | None:
        if not isinstance(value, Mapping):
            return None
        return cls(compiles=_count(value.get("compiles")), compile_s=_number(value.get("compile_s")) or 0.0,
                   functions=tuple(NumbaFunction.parse(f) for f in value.get("functions") or ()
                                   if isinstance(f, Mapping)))




@dataclass(frozen=True, slots=True)
class CpuTime:
    """What the probe saw of a cell on the CPU (``sched``, Linux): its own thread's time on a CPU and waiting
    for one, and every thread of the kernel's CPU time. Each is None when not a plausible time."""

    on_cpu_s: float | None
    wait_s: float | None
    cpu_s: float | None

    @classmethod
    def parse(cls, value: Any) -> CpuTime | None:
        if not isinstance(value, Mapping):
            return None
        return cls(on_cpu_s=_time(value.get("on_cpu_s")), wait_s=_time(value.get("wait_s")),
                   cpu_s=_time(value.get("cpu_s")))


@dataclass(frozen=True, slots=True)
class Samples:
    """Each repeat's figures of a cell run more than once (``--repeat N``)."""

    wall_s: tuple[float, ...]
    code_s: tuple[float, ...]
    compile_s: tuple[float, ...]
    status: tuple[str | None, ...]
    wait_s: tuple[float | None, ...] = ()  # each repeat's wait for a CPU, beside its wall (empty: not recorded)

    @classmethod
    def parse(cls, value: Any) -> Samples | None:
        if not isinstance(value, Mapping):
            return None

        def figures(key: str) -> tuple[float, ...]:
            return tuple(n for n in (_number(v) for v in value.get(key) or ()) if n is not None)

        waits = value.get("wait_s")
        return cls(wall_s=figures("wall_s"), code_s=figures("code_s"), compile_s=figures("compile_s"),
                   status=tuple(_text(s) for s in value.get("status") or ()),
                   wait_s=tuple(_time(w) for w in waits) if isinstance(waits, list) else ())


@dataclass(frozen=True, slots=True)
class Cell:
    """One code cell of a run: what ran (its source and where it sits) and what it cost."""

    index: int  # among the notebook's code cells, from 0
    cell_index: int | None  # among all its cells
    source_hash: str
    source: str | None  # the code that ran (None: a record of schema version 1)
    line: int | None
    lines: tuple[int, int] | None  # first and last line in its file (None: a record of schema version 1)
    first_line: str
    code_line: str
    tags: tuple[str, ...]
    status: str
    error: CellError | None
    execution_count: int | None
    wall_s: float | None
    code_s: float | None
    roundtrip_s: float | None
    compile_s: float | None
    run_s: float | None
    overhead_s: float | None
    compile_share: float | None
    spread: float | None
    jax: JaxFigures | None
    numba: NumbaFigures | None
    samples: Samples | None
    # The timeline summary, which ``collect.timeline`` reads, kept as recorded.
    timeline: Mapping[str, Any] | None
    programs: CellPrograms | None  # the compiled programs the cell ran (program data; None: not recorded)
    alarms: tuple[str, ...]  # what XLA printed to stderr (slow compile, constant folding)
    rss: Mapping[str, Any]
    gpu_memory: Mapping[str, Any]
    sched: CpuTime | None = None  # the cell's thread on a CPU and waiting for one (Linux)
    interrupted_by: str | None = None  # the signal that stopped an interrupted cell (SIGINT, SIGTERM)
    output_bytes: int | None = None  # what the cell sent to its outputs
    # nbscope's own collection after the cell's code (--forecast: session stop, HLO, lowering for CUDA), inside
    # wall_s; None: not recorded (no --forecast, or a record older than the field)
    collection_s: float | None = None
    collection: Mapping[str, float] | None = None  # its parts: session_stop_s, hlo_s, lowering_s (cut_stop_s apart)

    @property
    def notebook_wall_s(self) -> float | None:
        """``wall_s`` less nbscope's own collection: what the notebook's cell itself took."""
        return without_collection(self.wall_s, self.collection_s)

    @property
    def ran(self) -> bool:
        return self.status not in ("not-run", "skipped")

    @property
    def label(self) -> str:
        """``cell 3 (line 41)``: the cell's number as a reader counts code cells, and its line when known."""
        return f"cell {self.index + 1} (line {self.line})" if self.line else f"cell {self.index + 1}"

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> Cell:
        def integer(key: str) -> int | None:
            item = value.get(key)
            return item if isinstance(item, int) and not isinstance(item, bool) else None

        return cls(
            index=integer("index") or 0, cell_index=integer("cell_index"),
            source_hash=str(value.get("source_hash") or ""), source=_text(value.get("source")),
            line=integer("line"), lines=_line_range(value.get("lines")), first_line=str(value.get("first_line") or ""),
            code_line=str(value.get("code_line") or value.get("first_line") or ""),
            tags=tuple(str(t) for t in value.get("tags") or ()), status=str(value.get("status") or "ok"),
            error=CellError.parse(value.get("error")), execution_count=integer("execution_count"),
            wall_s=_number(value.get("wall_s")), code_s=_number(value.get("code_s")),
            roundtrip_s=_number(value.get("roundtrip_s")), compile_s=_number(value.get("compile_s")),
            run_s=_number(value.get("run_s")), overhead_s=_number(value.get("overhead_s")),
            compile_share=_number(value.get("compile_share")), spread=_number(value.get("spread")),
            jax=JaxFigures.parse(value.get("jax")), numba=NumbaFigures.parse(value.get("numba")),
            samples=Samples.parse(value.get("samples")),
            timeline=value.get("timeline") if isinstance(value.get("timeline"), Mapping) else None,
            programs=CellPrograms.parse(value.get("programs")),
            alarms=tuple(str(a) for a in value.get("alarms") or ()),
            rss=_object(value.get("rss")), gpu_memory=_object(value.get("gpu_memory")),
            sched=CpuTime.parse(value.get("sched")), interrupted_by=_text(value.get("interrupted_by")),
            output_bytes=integer("output_bytes"), collection_s=_time(value.get("collection_s")),
            collection=_times(value.get("collection")),
        )


@dataclass(frozen=True, slots=True)
class Totals:
    """A run's notebook-level figures (what ``nbscope runs`` lists)."""

    wall_s: float | None
    compile_s: float | None
    run_s: float | None
    cells: int
    cells_run: int
    cells_ok: int
    cells_failed: int
    compiles: int
    user_compiles: int
    eager_compiles: int
    library_compiles: int
    numba_compiles: int
    cache_hits: int
    cache_misses: int
    cache_state: str | None
    kernel_start_s: float | None
    peak_rss_bytes: float | None
    # a warm-cache run's saving against the cold run it was measured against (None: not a warm run)
    cache_saving_s: float | None = None
    cache_baseline_run: str | None = None
    cold_compiles: int | None = None

    @classmethod
    def parse(cls, value: Any) -> Totals:
        value = _object(value)
        return cls(
            wall_s=_number(value.get("wall_s")), compile_s=_number(value.get("compile_s")),
            run_s=_number(value.get("run_s")), cells=_count(value.get("cells")),
            cells_run=_count(value.get("cells_run")), cells_ok=_count(value.get("cells_ok")),
            cells_failed=_count(value.get("cells_failed")), compiles=_count(value.get("compiles")),
            user_compiles=_count(value.get("user_compiles")), eager_compiles=_count(value.get("eager_compiles")),
            library_compiles=_count(value.get("library_compiles")), numba_compiles=_count(value.get("numba_compiles")),
            cache_hits=_count(value.get("cache_hits")), cache_misses=_count(value.get("cache_misses")),
            cache_state=_text(value.get("cache_state")), kernel_start_s=_number(value.get("kernel_start_s")),
            peak_rss_bytes=_number(value.get("peak_rss_bytes")),
            cache_saving_s=_number(value.get("cache_saving_s")),
            cache_baseline_run=None if value.get("cache_baseline_run") is None else str(value["cache_baseline_run"]),
            cold_compiles=None if _number(value.get("cold_compiles")) is None else _count(value.get("cold_compiles")),
        )


@dataclass(frozen=True, slots=True)
class NotebookInfo:
    path: str | None
    format: str | None  # ipynb or myst
    kernel: str | None
    content_hash: str | None

    @classmethod
    def parse(cls, value: Any) -> NotebookInfo:
        value = _object(value)
        return cls(path=_text(value.get("path")), format=_text(value.get("format")),
                   kernel=_text(value.get("kernel")), content_hash=_text(value.get("content_hash")))


@dataclass(frozen=True, slots=True)
class RunnerInfo:
    """How the notebook ran, as the runner saw it from outside the kernel (``measurements.runner``:
    ``collect.runner`` for a profile, ``api.trace`` for a traced command). ``None``: not recorded."""

    pathway: str | None = None  # kernel (a profile), trace
    kernel_start_s: float | None = None  # spawning the kernel until it answered
    execute_s: float | None = None  # the cells, one after another, as nbclient ran them
    shutdown_s: float | None = None
    total_s: float | None = None
    kernel_restarts: int = 0  # a kernel that died before its first reply gets one more start
    interrupt_ignored: int | None = None  # the index of a timed-out cell that ignored the interrupt
    kernel_log_tail: str | None = None  # what the kernel printed last, kept for a run that did not end ok
    recovered_from: str | None = None  # the live file a recovered run was read from
    command: tuple[str, ...] = ()  # trace: the command that ran the notebooks
    command_wall_s: float | None = None
    returncode: int | None = None
    interrupted: str | None = None  # trace: the signal that stopped the command

    @classmethod
    def parse(cls, value: Any) -> RunnerInfo:
        value = _object(value)

        command = value.get("command")
        return cls(
            pathway=_text(value.get("pathway")), kernel_start_s=_number(value.get("kernel_start_s")),
            execute_s=_number(value.get("execute_s")), shutdown_s=_number(value.get("shutdown_s")),
            total_s=_number(value.get("total_s")), kernel_restarts=_integer(value, "kernel_restarts") or 0,
            interrupt_ignored=_integer(value, "interrupt_ignored"), kernel_log_tail=_text(value.get("kernel_log_tail")),
            recovered_from=_text(value.get("recovered_from")),
            command=tuple(str(c) for c in command) if isinstance(command, list) else (),
            command_wall_s=_number(value.get("command_wall_s")), returncode=_integer(value, "returncode"),
            interrupted=_text(value.get("interrupted")),
        )


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

    @classmethod
    def parse(cls, value: Any) -> KernelInfo | None:
        if not isinstance(value, Mapping):
            return None

        return cls(
            probe_version=_integer(value, "probe_version"), pid=_integer(value, "pid"), cwd=_text(value.get("cwd")),
            python=_text(value.get("python")), executable=_text(value.get("executable")),
            started_unix=_number(value.get("started_unix")), session=_text(value.get("session")),
            jax_cache_dir=_text(value.get("jax_cache_dir")), jax_platforms=_text(value.get("jax_platforms")),
        )


@dataclass(frozen=True, slots=True)
class NotebookRun:
    """The measurements of a ``profile`` or ``trace`` record, typed."""

    notebook: NotebookInfo
    cells: tuple[Cell, ...]
    totals: Totals
    repeats: int
    program_data: ProgramData | None  # the compiled programs the run executed (None: recorded without them)
    runner: RunnerInfo = field(default_factory=RunnerInfo)
    kernel: KernelInfo | None = None  # None: the probe never described its kernel (it did not load)

    @property
    def sources(self) -> dict[str, str]:
        """The code that ran, by source hash (cells of a version-1 record carry none)."""
        return {c.source_hash: c.source for c in self.cells if c.source is not None}

    def cell(self, index: int) -> Cell | None:
        return next((c for c in self.cells if c.index == index), None)

    @classmethod
    def parse(cls, measurements: Mapping[str, Any]) -> NotebookRun:
        repeats = measurements.get("repeats")
        return cls(
            notebook=NotebookInfo.parse(measurements.get("notebook")),
            cells=tuple(Cell.parse(c) for c in measurements.get("cells") or () if isinstance(c, Mapping)),
            totals=Totals.parse(measurements.get("totals")),
            repeats=repeats if isinstance(repeats, int) and not isinstance(repeats, bool) and repeats > 0 else 1,
            program_data=ProgramData.parse(measurements.get("programs")),
            runner=RunnerInfo.parse(measurements.get("runner")), kernel=KernelInfo.parse(measurements.get("kernel")),
        )
