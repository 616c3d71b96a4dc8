"""A cell's raw record: the notebook's cell, the probe's line and what nbclient saw (busy → idle, output,
errors), before the cell writers (``schema.build``) derive compile, run and overhead from it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nbscope._units import number
from nbscope.collect.notebook import CodeCell


def iso_seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def nbclient_timing(cell: Any) -> dict[str, float | None]:
    """nbclient's kernel-clock timestamps for a cell, as Unix seconds."""
    timing = cell.get("metadata", {}).get("execution", {})
    return {key: iso_seconds(timing.get(key)) for key in ("iopub.status.busy", "iopub.status.idle")}


def roundtrip(cell: Any) -> float | None:
    timing = nbclient_timing(cell)
    busy, idle = timing["iopub.status.busy"], timing["iopub.status.idle"]
    return idle - busy if busy is not None and idle is not None else None


def output_error(cell: Any) -> dict[str, str] | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return {"name": output.get("ename", ""), "message": str(output.get("evalue", ""))[:500]}
    return None


def merge_cell(code_cell: CodeCell, probe: dict[str, Any] | None, **runner_fields: Any) -> dict[str, Any]:
    """One cell record from the notebook's cell, the probe's line and the runner's observations."""
    return merge_described(code_cell.describe(), probe, **runner_fields)


def merge_described(description: dict[str, Any], probe: dict[str, Any] | None, **runner_fields: Any) -> dict[str, Any]:
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
        sched=None,
        output_bytes=0,
    )
    if probe is not None:
        for key in ("execution_count", "status", "error", "wall_s", "code_s", "started_unix", "jax", "numba", "alarms", "rss", "gpu_memory", "sched"):
            record[key] = probe.get(key)
        if probe.get("programs_hash"):  # [{name, hash}] of each program the cell compiled
            record["programs_hash"] = probe["programs_hash"]
        if isinstance(probe.get("programs"), dict):
            record.update(collection_times(probe["programs"]))
    record.update({k: v for k, v in runner_fields.items() if v is not None or k not in record})
    if record["wall_s"] is None and record["roundtrip_s"] is not None:
        record["wall_s"] = record["roundtrip_s"]
    return record  # compile_s, run_s, overhead_s: derived by the cell writers (nbscope.schema.build)


# The probe's collection after a cell's code (``--forecast``), by part: its line's name → the record's.
COLLECTION_PARTS = {"trace_stop_s": "session_stop_s", "gpu_lowering_s": "lowering_s", "programs_s": "hlo_s"}


def collection_times(probe_programs: dict[str, Any]) -> dict[str, Any]:
    """``collection_s`` (seconds nbscope's own collection took in the kernel after the cell's code, inside
    ``wall_s``) and ``collection`` (its parts), from the probe's ``programs`` line. A session the probe cut
    stopped on a thread of its own while the cell ran on: ``cut_stop_s`` records it, but it is no part of
    ``collection_s``, which the cell's figures leave out; ``lowering_jax_s``, the JAX trace and lower time
    nbscope's own lowering for CUDA triggered, is within ``lowering_s`` (and never in the cell's compile)."""
    parts = {part: seconds for name, part in COLLECTION_PARTS.items()
             if (seconds := number(probe_programs.get(name))) is not None}
    window = probe_programs.get("window")
    apart = {"cut_stop_s": number(window.get("stop_s")) if isinstance(window, dict) else None,
             "lowering_jax_s": number(probe_programs.get("gpu_lowering_jax_s"))}
    collection = {**parts, **{name: seconds for name, seconds in apart.items() if seconds is not None}}
    return {"collection_s": sum(parts.values()), "collection": collection}


def interrupted_described(description: dict[str, Any], elapsed_s: float | None, signal_name: str) -> dict[str, Any]:
    """The record of a cell a stop signal cut short, from its description (``CodeCell.describe()``): status
    ``interrupted``, how long it had run (``wall_s``, None when unknown) and the signal (``interrupted_by``)."""
    seconds = f" after {elapsed_s:.2f} s" if elapsed_s is not None else ""
    record = merge_described(description, None, status="interrupted", wall_s=elapsed_s, interrupted_by=signal_name)
    record["error"] = {"name": "Interrupted", "message": f"nbscope was stopped by {signal_name}{seconds} into this cell"}
    return record
