"""Forecast against a real GPU run of the same notebook: per cell, the forecast range, the measured
time and the error (``nbscope forecast CPU_RUN --gpu KEY --measured GPU_RUN``).

Cells are paired by source hash. Compile time is left out of both sides of the error: the forecast
carries the CPU's compile time over without forecasting it, and a GPU compiles differently; the error
is on the rest (``run``): measured GPU wall − its JAX compile, against the forecast range without the
carried-over compile term.
"""

from __future__ import annotations

from typing import Any

from nbscope._errors import NbscopeError


def _run_time(cell: dict[str, Any]) -> float | None:
    wall = cell.get("wall_s")
    if not isinstance(wall, (int, float)):
        return None
    jax = cell.get("jax") or {}
    compile_s = sum(float(jax.get(k) or 0.0) for k in ("trace_s", "lower_s", "backend_s"))
    return max(0.0, float(wall) - compile_s)


def _platform(record: Any) -> str | None:
    platform = (record.settings or {}).get("jax_platform")
    if platform:
        return str(platform)
    return None


def against_measured(result: dict[str, Any], measured: Any, device: str) -> dict[str, Any]:
    """Per cell and in total: forecast on ``device`` vs the measured run (a profile on that GPU)."""
    if measured.kind not in ("profile", "trace"):
        raise NbscopeError(f"--measured needs a profile run of the notebook on the GPU, not a {measured.kind} run")
    by_hash = {c.get("source_hash"): c for c in measured.measurements.get("cells") or []}
    rows = []
    paired = 0
    for cell in result["cells"]:
        other = by_hash.get(cell.get("source_hash"))
        outcome = cell["gpu"][device]
        compile_s = cell["cpu"]["compile_s"]
        low = max(0.0, outcome["low_s"] - compile_s)
        high = None if outcome["high_s"] is None else max(0.0, outcome["high_s"] - compile_s)
        row: dict[str, Any] = {
            "index": cell["index"], "line": cell.get("line"), "first_line": cell.get("first_line"),
            "cpu_s": cell["cpu"]["wall_s"], "forecast_low_s": low, "forecast_high_s": high,
            "measured_s": None, "measured_wall_s": None, "within": None, "error": None,
        }
        if other is not None and other.get("status") not in ("not-run", "skipped"):
            paired += 1
            run = _run_time(other)
            row["measured_s"], row["measured_wall_s"] = run, other.get("wall_s")
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
    return {
        "device": device,
        "measured_run": {"id": measured.run_id, "platform": _platform(measured), "started_at": measured.started_at,
                         "gpus": [d.get("name") for d in ((measured.fingerprint.get("gpu") or {}).get("devices") or [])
                                  if isinstance(d, dict)]},
        "cells": rows,
        "paired": paired,
        "within": sum(1 for r in rows if r["within"]),
        "total": {"measured_s": measured_total, "forecast_low_s": low_total, "forecast_high_s": high_total},
    }
