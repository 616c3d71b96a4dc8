"""Pairing cells across pathways, deciding what differs beyond noise, and the one-line verdict."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from nbscope._units import seconds
from nbscope.record import cells as cell_model

# Timings on a shared machine vary by about ±20 %; a cell differs only beyond the larger of these, or
# beyond 3 median absolute deviations when --repeat gave samples.
ABS_TOL_S = 0.05
REL_TOL = 0.25
MAD_FACTOR = 3.0
# Differences that add up to less than this (seconds, or share of the cells' total) do not explain a
# difference anyone would ask about, even when each is beyond its cell's noise.
MATERIAL_S = 0.25
MATERIAL_SHARE = 0.05
# Only cells that ran cleanly everywhere are compared: a traceback's formatting costs differ between
# IPython shells (0.5 s or more for the first one) and would pass for a pathway effect.
COMPARABLE = ("ok",)
# Which fixed cost each pathway reports, and how the verdict names it.
OVERHEAD_NAMES = {
    "process_start_s": "process start",
    "kernel_start_s": "kernel start",
    "book_outside_execution_s": "book build outside execution",
}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _brief(cell: Mapping[str, Any]) -> dict[str, Any]:
    jax, numba = cell.get("jax") or {}, cell.get("numba") or {}
    entry: dict[str, Any] = {
        "wall_s": cell.get("wall_s"),
        "compile_s": cell.get("compile_s"),
        "run_s": cell.get("run_s"),
        "status": cell.get("status"),
        "compiles": (jax.get("compiles") or 0) + (numba.get("compiles") or 0),
    }
    if cell.get("error"):
        entry["error"] = (cell["error"] or {}).get("name")
    if cell.get("skip_reason"):
        entry["skip_reason"] = cell["skip_reason"]
    samples = (cell.get("samples") or {}).get("wall_s")
    if samples and len(samples) > 1:
        entry["samples"] = samples
        entry["spread"] = cell.get("spread")
    return entry


def tolerance(entries: list[Mapping[str, Any]]) -> float:
    """How far apart two walls of one cell may be and still count as the same."""
    walls = [w for w in (_number(e.get("wall_s")) for e in entries) if w is not None]
    tol = max(ABS_TOL_S, REL_TOL * min(walls)) if walls else ABS_TOL_S
    for entry in entries:
        samples = entry.get("samples")
        if samples and len(samples) > 1:
            median = statistics.median(samples)
            tol = max(tol, MAD_FACTOR * statistics.median(abs(s - median) for s in samples))
    return tol


def pair_cells(reference: list[dict[str, Any]], results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per code cell of ``reference`` (the notebook's cells) with each pathway's figures
    (``results`` maps a pathway's name to its result, whose ``cells`` ran that notebook)."""
    ran = {
        name: {id(p.a): p.b for p in cell_model.pair_cells(reference, r.cells) if p.match == "hash"}
        for name, r in results.items() if r.cells
    }
    rows = []
    for cell in reference:
        by_pathway = {name: _brief(paired[id(cell)]) for name, paired in ran.items() if id(cell) in paired}
        row: dict[str, Any] = {
            "source_hash": cell.get("source_hash"),
            "index": cell.get("index"),
            "line": cell.get("line"),
            "first_line": cell.get("first_line"),
            "by_pathway": by_pathway,
            "paired": len(by_pathway) == len(ran) and len(ran) > 0,
        }
        comparable = {n: e for n, e in by_pathway.items() if e["status"] in COMPARABLE and _number(e["wall_s"]) is not None}
        row["compared"] = len(comparable) >= 2 and len(comparable) == len(by_pathway)
        row["differs"] = False
        if len(comparable) >= 2:
            walls = {n: float(e["wall_s"]) for n, e in comparable.items()}
            fastest, slowest = min(walls, key=walls.__getitem__), max(walls, key=walls.__getitem__)
            row["delta_s"] = walls[slowest] - walls[fastest]
            row["tolerance_s"] = tolerance(list(comparable.values()))
            row["differs"] = row["delta_s"] > row["tolerance_s"]
            row["slowest"], row["fastest"] = slowest, fastest
        statuses = {e["status"] for e in by_pathway.values()}
        row["ran_differently"] = len(statuses) > 1
        rows.append(row)
    return rows


def fixed_overheads(pathways: Mapping[str, Mapping[str, Any]]) -> list[str]:
    parts = []
    for name, entry in pathways.items():
        overheads = entry.get("overheads") or {}
        for key, label in OVERHEAD_NAMES.items():
            value = _number(overheads.get(key))
            if value is not None:
                parts.append(f"{label} {seconds(value)} ({name})")
    return parts


def verdict(
    rows: list[dict[str, Any]],
    pathways: Mapping[str, Mapping[str, Any]],
    *,
    repeat: int = 1,
    busy: tuple[float, int] | None = None,
) -> str:
    """One line: does the pathway explain a difference, and what are the fixed costs apart from cells.

    ``busy`` (load average, CPUs) says the machine had more runnable work than CPUs during the runs:
    then a difference may come from the other work, and the verdict says so.
    """
    ran = [n for n, e in pathways.items() if e.get("status") not in ("skipped", "error")]
    not_run = [f"{n} {e.get('status')}: {e.get('skipped') or e.get('error')}" for n, e in pathways.items() if n not in ran]
    overheads = fixed_overheads({n: pathways[n] for n in ran})
    overhead_text = f"fixed overheads: {', '.join(overheads)}" if overheads else "no fixed overheads measured"
    if len(ran) < 2:
        only = f"only {ran[0]} ran" if ran else "no pathway ran"
        return f"{only}: nothing to compare" + (f" ({'; '.join(not_run)})" if not_run else "")
    compared = [r for r in rows if r.get("compared")]
    execution = {n: sum(float(r["by_pathway"][n]["wall_s"]) for r in compared) for n in ran}
    execution_text = ", ".join(f"{n} {seconds(s)}" for n, s in execution.items())
    differing = sorted((r for r in compared if r.get("differs")), key=lambda r: -float(r["delta_s"]))
    different_runs = [r for r in rows if r.get("ran_differently")]
    tail = ""
    if different_runs:
        notes = []
        for row in different_runs[:3]:
            statuses = ", ".join(f"{n} {e['status']}" for n, e in row["by_pathway"].items())
            notes.append(f"{cell_model.label(row)}: {statuses}")
        tail = f"; {len(different_runs)} cell(s) ran differently ({'; '.join(notes)})"
    if not_run:
        tail += f"; {'; '.join(not_run)}"
    moved = sum(float(r["delta_s"]) for r in differing)
    material = max(MATERIAL_S, MATERIAL_SHARE * statistics.median(execution.values()))
    if not differing or moved < material:
        small = (
            f" but for {len(differing)} small difference(s) totalling {seconds(moved)}" if differing else ""
        )
        # On a busy machine the noise is wide, so "within noise" is a weaker statement: say so.
        busy_note = f"; the machine was busy (load average up to {busy[0]:.1f} on {busy[1]} CPUs)" if busy else ""
        return (
            f"the pathway does not explain the difference: per-cell walls agree within noise over "
            f"{len(compared)} cells{small} (cells total {execution_text}); {overhead_text}{tail}{busy_note}"
        )
    shown = []
    for row in differing[:3]:
        walls = row["by_pathway"]
        shown.append(
            f"{cell_model.label(row)} {row['slowest']} {seconds(walls[row['slowest']]['wall_s'])} vs "
            f"{row['fastest']} {seconds(walls[row['fastest']]['wall_s'])}"
        )
    caution = ""
    if busy is not None:
        caution = (
            f" (caution: the machine was busy, load average up to {busy[0]:.1f} on {busy[1]} CPUs, so part of this "
            "may be other work; rerun on a quiet machine" + (" or with --repeat 3)" if repeat == 1 else ")")
        )
    elif repeat == 1:
        caution = " (a single run: --repeat 3 tells a pathway effect from noise)"
    return (
        f"the pathway explains {seconds(moved)}{caution}: {len(differing)} of {len(compared)} cells differ beyond "
        f"noise ({'; '.join(shown)}; cells total {execution_text}); {overhead_text}{tail}"
    )


def combine_overheads(results: Sequence[Any]) -> tuple[dict[str, Any], dict[str, list[float]] | None]:
    """Medians of each fixed cost over repeats, and the samples when there were several."""
    keys: list[str] = []
    for result in results:
        keys += [k for k in result.overheads if k not in keys]
    combined: dict[str, Any] = {}
    samples: dict[str, list[float]] = {}
    for key in keys:
        values = [v for v in (_number(r.overheads.get(key)) for r in results) if v is not None]
        if values:
            combined[key] = statistics.median(values)
            samples[key] = values
        else:
            other = next((r.overheads.get(key) for r in results if r.overheads.get(key) is not None), None)
            combined[key] = other
    return combined, (samples if len(results) > 1 else None)
