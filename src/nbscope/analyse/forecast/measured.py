"""Forecast against a real GPU run of the same notebook: per cell, the forecast range, the measured
time and the error (``nbscope forecast CPU_RUN --gpu KEY --measured GPU_RUN``, and ``nbscope compare``
when one run is on a GPU and the other is a CPU run recorded with program data).

Cells are paired by the cell model (:func:`nbscope.record.cells.pair_cells`), and only cells whose
source is the same on both sides are compared (a forecast of edited code says nothing about the new
code). Compile time is left out of both sides of the error: the forecast carries the CPU's compile time
over without forecasting it, and a GPU compiles differently; the error is on the rest (``run``):
measured GPU wall − its JAX compile, against the forecast range without the carried-over compile term.
The error is the forecast's midpoint (geometric mean of low and high) over the measured time, minus 1.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbscope._errors import NbscopeError
from nbscope.record.cells import pair_cells
from nbscope.record.model import Cell

SAME_SOURCE = ("hash", "moved")


def _run_time(cell: Cell) -> float | None:
    """A measured cell's time less its JAX compile (what the forecast, compile left out, is compared with)."""
    if cell.wall_s is None:
        return None
    return max(0.0, cell.wall_s - (cell.jax.compile_s if cell.jax is not None else 0.0))


def _platform(record: Any) -> str | None:
    from nbscope.analyse.compare import platform_of

    return platform_of(record)["platform"]


def measured_gpus(record: Any) -> list[str]:
    """The GPU names a run's fingerprint lists (what NVML reported: ``Tesla T4``)."""
    return [gpu.name for gpu in record.machine().gpus if gpu.name]


def against_measured(result: dict[str, Any], measured: Any, device: str) -> dict[str, Any]:
    """Per cell and in total: forecast on ``device`` vs the measured run (a profile on that GPU)."""
    if measured.kind not in ("profile", "trace"):
        raise NbscopeError(f"--measured needs a profile run of the notebook on the GPU, not a {measured.kind} run")
    # The forecast's cells (dicts of its result) pair with the measured run's typed cells by source hash.
    pairs = pair_cells(result["cells"], measured.notebook_run().cells)
    paired_cell: dict[int, Cell] = {id(p.a): p.b for p in pairs
                                    if p.a is not None and isinstance(p.b, Cell) and p.match in SAME_SOURCE}
    rows = []
    paired = 0
    for cell in result["cells"]:
        other = paired_cell.get(id(cell))
        outcome = cell["gpu"][device]
        compile_term = next((t for t in outcome["terms"] if t["kind"] == "compile"), None)
        compile_low = compile_term["low_s"] if compile_term else 0.0
        compile_high = compile_term["high_s"] if compile_term else 0.0
        low = max(0.0, outcome["low_s"] - compile_low)
        high = None if outcome["high_s"] is None else max(0.0, outcome["high_s"] - compile_high)
        row: dict[str, Any] = {
            "index": cell["index"], "line": cell.get("line"), "first_line": cell.get("first_line"),
            "cpu_s": cell["cpu"]["wall_s"], "forecast_low_s": low, "forecast_high_s": high,
            "verdict": outcome["verdict"], "measured_s": None, "measured_wall_s": None, "within": None, "error": None,
        }
        if other is not None and other.ran:
            paired += 1
            run = _run_time(other)
            row["measured_s"], row["measured_wall_s"] = run, other.wall_s
            if run is not None:
                row["within"] = low <= run and (high is None or run <= high)
                mid = low if high is None else (low * high) ** 0.5 if low > 0 else (low + high) / 2
                row["error"] = (mid - run) / run if run > 0 else None
        rows.append(row)
    if not paired:
        raise NbscopeError("--measured shares no cell with the forecast run (different notebook or version)")
    measured_total = sum(r["measured_s"] for r in rows if r["measured_s"] is not None)
    low_total = sum(r["forecast_low_s"] for r in rows if r["measured_s"] is not None)
    highs = [r["forecast_high_s"] for r in rows if r["measured_s"] is not None]
    high_total = None if any(h is None for h in highs) else sum(h for h in highs if h is not None)
    mid_total = low_total if high_total is None else (low_total * high_total) ** 0.5 if low_total > 0 else high_total / 2
    notes = []
    platform = _platform(measured)
    if platform != "gpu":
        notes.append(f"the measured run used the {platform} backend, not a GPU: its times measure no GPU")
    device_entry = next((d for d in result["devices"] if d["key"] == device), None)
    names = measured_gpus(measured)
    if device_entry is not None and names and platform == "gpu" and not _matches(device_entry, names[0]):
        notes.append(f"the measured run ran on a {names[0]}, the forecast is for the {device_entry['name']}")
    return {
        "device": device,
        "measured_run": {"id": measured.run_id, "platform": platform, "started_at": measured.started_at,
                         "gpus": names},
        "cells": rows,
        "paired": paired,
        "within": sum(1 for r in rows if r["within"]),
        "total": {"measured_s": measured_total, "forecast_low_s": low_total, "forecast_high_s": high_total,
                  "error": (mid_total - measured_total) / measured_total if measured_total > 0 else None},
        "notes": notes,
    }


def _matches(device: Mapping[str, Any], name: str) -> bool:
    lowered = name.lower()
    return device["name"].lower() == lowered or any(
        re.search(rf"(?<![a-z0-9]){re.escape(m.lower())}(?![a-z0-9])", lowered) for m in device.get("match") or [])


def forecast_vs_measured(
    a: Any,
    b: Any,
    *,
    devices_file: str | Path | None = None,
) -> dict[str, Any] | None:
    """For ``nbscope compare``: when one run is on a GPU and the other is a CPU run with program data,
    the CPU run's forecast for that GPU against the GPU run, per cell (:func:`against_measured`).

    None when the pair is not such a pair; ``{"comparison": None, "note": ...}`` when the GPU is not in
    the device table (its name and how to add it) or the runs share no cell.
    """
    from nbscope.analyse.forecast import forecast
    from nbscope.analyse.forecast.devices import load_table, resolve

    platforms = {id(r): _platform(r) for r in (a, b)}
    cpu = next((r for r in (a, b) if platforms[id(r)] == "cpu" and r.notebook_run().program_data is not None), None)
    gpu = next((r for r in (a, b) if platforms[id(r)] == "gpu"), None)
    if cpu is None or gpu is None:
        return None
    cpu_label = f"run {cpu.run_id}" if cpu.run_id is not None else "the CPU run"
    gpu_label = f"run {gpu.run_id}" if gpu.run_id is not None else "the GPU run"
    table = load_table(devices_file)
    names = measured_gpus(gpu)
    if not names:
        return {"comparison": None, "cpu_run": cpu.run_id, "gpu_run": gpu.run_id,
                "note": f"{gpu_label}'s fingerprint names no GPU: no forecast to compare it with"}
    try:
        (device,) = resolve(table, names[0])
    except NbscopeError:
        return {"comparison": None, "cpu_run": cpu.run_id, "gpu_run": gpu.run_id,
                "note": (f"{gpu_label} ran on a {names[0]}, which is not in the device table ({table.known()}): add it "
                         "in a device file or calibrate it (docs/forecast.md) to compare it with the forecast")}
    result = forecast(cpu, [device.key], table=table, run_label=cpu_label)
    try:
        comparison = against_measured(result, gpu, device.key)
    except NbscopeError as exc:
        return {"comparison": None, "cpu_run": cpu.run_id, "gpu_run": gpu.run_id, "note": str(exc)}
    return {"comparison": comparison, "cpu_run": cpu.run_id, "gpu_run": gpu.run_id, "device": device.key,
            "device_name": device.name, "note": None}
