"""The lines the in-kernel probe writes (``collect/probe/_nbscope_probe.py``), typed: what the collector reads of
each, decoded once where the line is read (``collect._sidefiles.ProbeReader``, ``api.trace``'s kernel logs) by
``schema.codec.decode``.

A cell's parts that go into its record as the probe measured them (its JAX and Numba figures, memory, CPU time)
stay mappings kept as recorded: the record is their one typed reader (``schema.model.Cell``), and they are
written on unchanged. A line of an older or a broken probe reads what it lacks as None, never as a guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbscope.schema.codec import Measured, given


@dataclass(frozen=True, slots=True)
class ProbeLine:
    """Any line of the probe's, by its kind: ``start``, ``cell``, ``warning`` or ``kernel`` (None: not a line of
    the probe's)."""

    type: str | None


@dataclass(frozen=True, slots=True)
class ProbeStart:
    """``{"type": "start"}``: a cell began (its source's hash, and when)."""

    seq: int  # the probe's count of cells run in this kernel
    hash: str | None
    unix: Measured


@dataclass(frozen=True, slots=True)
class ProbeWarning:
    """``{"type": "warning"}``: something the probe could not do in the cell ``seq`` (kept with the kernel)."""

    seq: int | None
    message: str


@dataclass(frozen=True, slots=True)
class ProbeTimeline:
    """A cell line's ``timeline_trace`` (``--timeline``): where the cell's trace was written, or why not."""

    path: str | None
    skipped: str | None  # why no trace was taken (JAX's backends not started yet)
    error: str | None  # why stopping it failed
    stop_s: Measured  # what stopping it took

    present = staticmethod(given)


@dataclass(frozen=True, slots=True)
class ProbePrograms:
    """A cell line's ``programs`` (``profile --forecast`` / ``--programs``): where the probe left the cell's trace,
    HLO and lowering for CUDA, or why it has none, and what writing them cost in the kernel."""

    trace: str | None  # the cell's profiler trace
    shared: bool  # the trace is the timeline's (``--timeline``), which keeps its own file
    trace_error: str | None
    window: Mapping[str, Any] | None  # a trace cut short: what it covered (``schema.programs.TraceWindow``)
    trace_stop_s: Measured
    # waiting, while the session recorded, for dispatched programs before lowering the next (the programs' own
    # run time, which would otherwise have overlapped that compile)
    dispatch_wait_s: Measured
    # waiting as the cell started, before its session, for programs an earlier cell dispatched that ran on (their
    # run time, counted in the cell's time; no trace of the cell saw them)
    in_flight_wait_s: Measured
    compile_read_s: (
        Measured  # the guard's memory readings at each compile's end, within JAX's compile timing (older probes)
    )
    # stopping the session as each compile began and starting the next as it ended: within the cell's code, which
    # the probe's code_s and backend compile figures leave out
    split_s: Measured
    trace_note: str | None  # a part of a split trace lost (the trace holds the rest)
    programs: str | None  # the HLO of the programs compiled in the cell
    programs_error: str | None
    programs_s: Measured
    gpu_lowering: str | None  # the programs' lowering for CUDA
    gpu_lowering_error: str | None
    gpu_lowering_s: Measured
    gpu_lowering_jax_s: Measured  # JAX's trace and lower time within ``gpu_lowering_s``
    target: str | None = None  # the modules a TPU would compile (``_nbscope_program.TARGET_NAME``)
    target_error: str | None = None
    target_s: Measured = None
    # every execution in the cell, counted by the probe without the trace: by program id (None: older probes)
    counts: Mapping[str, int] | None = None
    uncounted: int | None = None  # executions counted whose program is not known
    counts_note: str | None = None  # why the counts may be short
    # per program id, each while's [file, line, iterations] in a sampled call run again (probe's _nbscope_trips)
    loop_trips: Mapping[str, Sequence[Sequence[Any]]] | None = None
    loop_trips_error: str | None = None
    loop_trips_s: Measured = None  # counting them, after the cell's time
    synced: Mapping[str, int] | None = None  # per program id, calls whose result the host read before the next one

    present = staticmethod(given)  # an empty object says nothing of the cell's programs


@dataclass(frozen=True, slots=True)
class LoweredLoop:
    """A loop of a program's lowering for CUDA: its name stack and the source line that made it."""

    stack: str | None
    line: int | None


@dataclass(frozen=True, slots=True)
class GpuLoweringEntry:
    """One program of the probe's ``gpu_lowering`` file: what it would run on a GPU, or why it was not lowered."""

    function: str | None  # the jitted function's name
    source: str | None  # how it was lowered ("lower (cuda)"), or "not lowered"
    skipped: str | None  # why it was not lowered (no loop, branch or library call)
    error: str | None  # why lowering failed
    loops: tuple[LoweredLoop, ...]
    custom_calls: Mapping[str, Any] | None  # library calls, by target
    conditionals: Measured
    seconds: Measured  # the lowering's own time


@dataclass(frozen=True, slots=True)
class ProbeCell:
    """``{"type": "cell"}``: what the probe measured of one cell, as it finished."""

    seq: int
    hash: str
    execution_count: int | None
    status: str | None  # ok or error
    error: Mapping[str, Any] | None  # name and message
    wall_s: Measured
    code_s: Measured
    started_unix: Measured
    jax: Mapping[str, Any] | None
    numba: Mapping[str, Any] | None
    alarms: tuple[str, ...] | None  # what XLA printed to stderr
    rss: Mapping[str, Any] | None
    gpu_memory: Mapping[str, Any] | None
    device_memory: Mapping[str, Any] | None
    sched: Mapping[str, Any] | None
    programs_hash: tuple[Mapping[str, Any], ...] | None  # each program the cell compiled: name and hash
    timeline_trace: ProbeTimeline | None
    programs: ProbePrograms | None
    # the line as written: a figure the probe adds goes into the cell's record as measured, under the probe's name
    # for it, without a field here or a line in the collector (``schema.model.Cell`` is its one typed reader)
    document: Mapping[str, Any]

    @staticmethod
    def reshape(value: Mapping[str, Any]) -> Mapping[str, Any]:
        return {**value, "document": value}
