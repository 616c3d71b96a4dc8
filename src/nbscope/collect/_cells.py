"""A cell's raw record: the notebook's cell, the probe's line and what nbclient saw (busy → idle, output,
errors), before the cell writers (``schema.build``) derive compile, run and overhead from it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from nbscope._redact import shorten
from nbscope._units import number
from nbscope.collect.notebook import CodeCell
from nbscope.schema.codec import decode_optional
from nbscope.schema.notebook_cell import ExecutionTimes, NotebookCell
from nbscope.schema.probe import ProbeCell, ProbePrograms
from nbscope.schema.programs import TraceWindow


def iso_seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def roundtrip(times: ExecutionTimes) -> float | None:
    """From the kernel's busy to its idle, on its own clock (nbclient's timestamps)."""
    busy, idle = iso_seconds(times.busy), iso_seconds(times.idle)
    return idle - busy if busy is not None and idle is not None else None


def output_error(cell: NotebookCell) -> dict[str, str] | None:
    """The exception a cell's error output names, when it has one."""
    for output in cell.outputs:
        if output.output_type == "error":
            return {"name": output.ename or "", "message": shorten(output.evalue or "", 500)}
    return None


# What a probe's cell line holds besides the cell's figures: the line's own keys, and the parts the collector reads
# itself (the programs' files, the timeline's trace). Any other key is a figure, recorded as the probe measured it.
_LINE = frozenset({"type", "seq", "hash", "programs", "programs_hash", "timeline_trace"})


def merge_cell(code_cell: CodeCell, probe: ProbeCell | None, **runner_fields: object) -> dict[str, object]:
    """One cell record from the notebook's cell, the probe's line and the runner's observations."""
    return merge_described(code_cell.describe(), probe, **runner_fields)


def merge_described(
    description: dict[str, object], probe: ProbeCell | None, **runner_fields: object
) -> dict[str, object]:
    """:func:`merge_cell` from a cell's description (``CodeCell.describe()``), e.g. one kept in a live file."""
    record = dict(description)
    record.update(
        execution_count=None,
        status="not-run",
        error=None,
        wall_s=None,
        roundtrip_s=None,
        code_s=None,
        compile_s=None,
        run_s=None,
        overhead_s=None,
        compile_share=None,
        jax=None,
        numba=None,
        alarms=[],
        rss=None,
        gpu_memory=None,
        device_memory=None,
        sched=None,
        output_bytes=0,
    )
    if probe is not None:
        record.update(
            execution_count=probe.execution_count,
            status=probe.status,
            error=_own(probe.error),
            wall_s=probe.wall_s,
            code_s=probe.code_s,
            started_unix=probe.started_unix,
            jax=_own(probe.jax),
            numba=_own(probe.numba),
            alarms=None if probe.alarms is None else list(probe.alarms),
            rss=_own(probe.rss),
            gpu_memory=_own(probe.gpu_memory),
            device_memory=_own(probe.device_memory),
            sched=_own(probe.sched),
        )
        record.update({key: value for key, value in probe.document.items() if key not in record and key not in _LINE})
        if probe.programs_hash:  # [{name, hash}] of each program the cell compiled
            record["programs_hash"] = [dict(entry) for entry in probe.programs_hash]
        if probe.programs is not None:
            record.update(collection_times(probe.programs))
    record.update({k: v for k, v in runner_fields.items() if v is not None or k not in record})
    if record["wall_s"] is None and record["roundtrip_s"] is not None:
        record["wall_s"] = record["roundtrip_s"]
    return record  # compile_s, run_s, overhead_s: derived by the cell writers (nbscope.schema.build)


def _own(part: Mapping[str, object] | None) -> dict[str, object] | None:
    """A part of the probe's line as the record's own object (the cell writers add to it), as measured."""
    return None if part is None else dict(part)


def collection_times(probe_programs: ProbePrograms) -> dict[str, object]:
    """``collection_s`` (seconds nbscope's own collection took in the kernel, inside ``wall_s``: after the cell's
    code, and ``split_s``, the session stopped and started again around each compile, within the code but left
    out of the probe's ``code_s`` and compile figures) and ``collection`` (its parts), from the probe's
    ``programs`` line. A session the probe cut
    stopped on a thread of its own while the cell ran on: ``cut_stop_s`` records it, but it is no part of
    ``collection_s``, which the cell's figures leave out, nor is ``dispatch_wait_s`` (the cell's thread waiting,
    before it lowered a program, for programs dispatched earlier to finish: their run time, spent while the
    session recorded and not overlapped with the compile after it), nor ``in_flight_wait_s`` (waiting as the
    cell started, before its session, for programs an earlier cell dispatched: their run time, in the cell's
    time, which no trace of the cell saw), nor ``compile_read_s`` (the guard's memory
    readings as each compile ended, within the cell's compile figure); ``lowering_jax_s``, the JAX trace and lower time
    nbscope's own lowering for CUDA triggered, is within ``lowering_s`` (and never in the cell's compile)."""
    measured = {
        "session_stop_s": probe_programs.trace_stop_s,
        # lowering for CUDA, and keeping (or lowering) each new program's module for the TPU
        "lowering_s": sum(number(f) or 0.0 for f in (probe_programs.gpu_lowering_s, probe_programs.target_s))
        if probe_programs.gpu_lowering_s is not None or probe_programs.target_s is not None
        else None,
        "hlo_s": probe_programs.programs_s,  # the record's name of each part of the probe's collection
        "split_s": probe_programs.split_s,
        "trips_s": probe_programs.loop_trips_s,  # sampled calls run again to count their loops' iterations
    }
    parts = {part: seconds for part, figure in measured.items() if (seconds := number(figure)) is not None}
    window = decode_optional(TraceWindow, probe_programs.window)
    apart = {
        "cut_stop_s": window.stop_s if window is not None else None,
        "lowering_jax_s": number(probe_programs.gpu_lowering_jax_s),
        "dispatch_wait_s": number(probe_programs.dispatch_wait_s),
        "in_flight_wait_s": number(probe_programs.in_flight_wait_s),
        "compile_read_s": number(probe_programs.compile_read_s),
    }
    collection = {**parts, **{name: seconds for name, seconds in apart.items() if seconds is not None}}
    return {"collection_s": sum(parts.values()), "collection": collection}


# A timed-out cell's error when the cell ended cleanly all the same (its interrupt swallowed by a bare except, or
# come as it ended): for ``profile --timeout`` and ``trace --cell-timeout`` alike.
FINISHED_ANYWAY = "; the cell did not stop at the interrupt and finished without error"


def interrupted_described(
    description: dict[str, object], elapsed_s: float | None, signal_name: str
) -> dict[str, object]:
    """The record of a cell a stop signal cut short, from its description (``CodeCell.describe()``): status
    ``interrupted``, how long it had run (``wall_s``, None when unknown) and the signal (``interrupted_by``)."""
    seconds = f" after {elapsed_s:.2f} s" if elapsed_s is not None else ""
    record = merge_described(description, None, status="interrupted", wall_s=elapsed_s, interrupted_by=signal_name)
    record["error"] = {
        "name": "Interrupted",
        "message": f"nbscope was stopped by {signal_name}{seconds} into this cell",
    }
    return record
