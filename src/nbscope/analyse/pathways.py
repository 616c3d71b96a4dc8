"""Pairing cells across pathways, deciding what differs beyond noise, and the one-line verdict. The record's
typed model (:class:`PathwaysRun` and its parts) is ``nbscope.schema.pathways``."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from nbscope._units import number, seconds
from nbscope.record import cells as cell_model
from nbscope.schema.codec import decode
from nbscope.schema.model import Cell
from nbscope.schema.pathways import (
    NOT_RAN,
    BenchFigure,
    FigureEntry,
    PathwayCell,
    PathwayEntry,
    PathwayRow,
    PathwaysRun,
    PathwaysTotals,
)

__all__ = [
    "NOT_RAN",
    "BenchFigure",
    "FigureEntry",
    "PathwayCell",
    "PathwayEntry",
    "PathwayRow",
    "PathwaysRun",
    "PathwaysTotals",
    "combine_overheads",
    "fixed_overheads",
    "pair_cells",
    "tolerance",
    "verdict",
]

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


# ---- pairing and the verdict ---------------------------------------------------------------------


def tolerance(entries: Sequence[PathwayCell]) -> float:
    """How far apart two walls of one cell may be and still count as the same."""
    walls = [e.wall_s for e in entries if e.wall_s is not None]
    tol = max(ABS_TOL_S, REL_TOL * min(walls)) if walls else ABS_TOL_S
    for entry in entries:
        if len(entry.samples) > 1:
            median = statistics.median(entry.samples)
            tol = max(tol, MAD_FACTOR * statistics.median(abs(s - median) for s in entry.samples))
    return tol


def _typed(cells: Sequence[Mapping[str, object]]) -> list[Cell]:
    return [decode(Cell, c) for c in cells]


class _Ran(Protocol):  # a pathway's result (``api.pathways.PathwayResult``)
    @property
    def cells(self) -> Sequence[Mapping[str, object]]: ...


def pair_cells(reference: Sequence[Mapping[str, object]], results: Mapping[str, _Ran]) -> list[PathwayRow]:
    """One row per code cell of ``reference`` (the notebook's cells) with each pathway's figures
    (``results`` maps a pathway's name to its result, whose ``cells`` ran that notebook)."""
    notebook = _typed(reference)
    ran: dict[str, dict[int, PathwayCell]] = {}
    for name, result in results.items():
        if not result.cells:
            continue
        ran[name] = {
            id(p.a): PathwayCell.of(p.b)
            for p in cell_model.pair_cells(notebook, _typed(result.cells))
            if p.match == "hash" and p.a is not None and p.b is not None
        }
    return [
        _row(cell, {name: paired[id(cell)] for name, paired in ran.items() if id(cell) in paired}, len(ran))
        for cell in notebook
    ]


def _row(cell: Cell, by_pathway: dict[str, PathwayCell], pathways: int) -> PathwayRow:
    comparable = {n: e for n, e in by_pathway.items() if e.status in COMPARABLE and e.wall_s is not None}
    delta = allowed = slowest = fastest = None
    if len(comparable) >= 2:
        walls = {n: e.wall_s for n, e in comparable.items() if e.wall_s is not None}
        fastest, slowest = min(walls, key=walls.__getitem__), max(walls, key=walls.__getitem__)
        delta, allowed = walls[slowest] - walls[fastest], tolerance(list(comparable.values()))
    return PathwayRow(
        source_hash=cell.source_hash or None,
        index=cell.index,
        line=cell.line,
        first_line=cell.first_line,
        by_pathway=by_pathway,
        paired=len(by_pathway) == pathways and pathways > 0,
        compared=len(comparable) >= 2 and len(comparable) == len(by_pathway),
        differs=delta is not None and allowed is not None and delta > allowed,
        delta_s=delta,
        tolerance_s=allowed,
        slowest=slowest,
        fastest=fastest,
        ran_differently=len({e.status for e in by_pathway.values()}) > 1,
    )


def fixed_overheads(pathways: Mapping[str, PathwayEntry]) -> list[str]:
    parts = []
    for name, entry in pathways.items():
        costs = entry.fixed_costs
        for key, label in OVERHEAD_NAMES.items():
            value = costs.get(key)
            if value is not None:
                parts.append(f"{label} {seconds(value)} ({name})")
    return parts


def verdict(
    rows: Sequence[PathwayRow],
    pathways: Mapping[str, PathwayEntry],
    *,
    repeat: int = 1,
    busy: tuple[float, int] | None = None,
) -> str:
    """One line: does the pathway explain a difference, and what are the fixed costs apart from cells.

    ``pathways``: the record's ``pathways`` entries. ``busy`` (load
    average, CPUs) says the machine had more runnable work than CPUs during the runs: then a difference may
    come from the other work, and the verdict says so.
    """
    ran = [n for n, e in pathways.items() if e.status not in ("skipped", "error")]
    not_run = [f"{n} {e.status}: {e.skipped or e.error}" for n, e in pathways.items() if n not in ran]
    overheads = fixed_overheads({n: pathways[n] for n in ran})
    overhead_text = f"fixed overheads: {', '.join(overheads)}" if overheads else "no fixed overheads measured"
    if len(ran) < 2:
        only = f"only {ran[0]} ran" if ran else "no pathway ran"
        return f"{only}: nothing to compare" + (f" ({'; '.join(not_run)})" if not_run else "")
    compared = [r for r in rows if r.compared]
    execution = {n: sum(r.by_pathway[n].wall_s or 0.0 for r in compared) for n in ran}
    execution_text = ", ".join(f"{n} {seconds(s)}" for n, s in execution.items())
    differing = sorted((r for r in compared if r.differs), key=lambda r: -(r.delta_s or 0.0))
    different_runs = [r for r in rows if r.ran_differently]
    tail = ""
    if different_runs:
        notes = []
        for row in different_runs[:3]:
            statuses = ", ".join(f"{n} {e.status}" for n, e in row.by_pathway.items())
            notes.append(f"{row.label}: {statuses}")
        tail = f"; {len(different_runs)} cell(s) ran differently ({'; '.join(notes)})"
    if not_run:
        tail += f"; {'; '.join(not_run)}"
    moved = sum(r.delta_s or 0.0 for r in differing)
    material = max(MATERIAL_S, MATERIAL_SHARE * statistics.median(execution.values()))
    if not differing or moved < material:
        small = f" but for {len(differing)} small difference(s) totalling {seconds(moved)}" if differing else ""
        # On a busy machine the noise is wide, so "within noise" is a weaker statement: say so.
        busy_note = f"; the machine was busy (load average up to {busy[0]:.1f} on {busy[1]} CPUs)" if busy else ""
        return (
            f"the pathway does not explain the difference: per-cell walls agree within noise over "
            f"{len(compared)} cells{small} (cells total {execution_text}); {overhead_text}{tail}{busy_note}"
        )
    shown = []
    for row in differing[:3]:
        slowest, fastest = row.in_pathway(row.slowest or ""), row.in_pathway(row.fastest or "")
        shown.append(
            f"{row.label} {row.slowest} {seconds(slowest.wall_s if slowest else None)} vs "
            f"{row.fastest} {seconds(fastest.wall_s if fastest else None)}"
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


def combine_overheads(results: Sequence[Any]) -> tuple[dict[str, object], dict[str, list[float]] | None]:
    """Medians of each fixed cost over repeats, and the samples when there were several."""
    keys = dict.fromkeys(k for result in results for k in result.overheads)
    combined: dict[str, object] = {}
    samples: dict[str, list[float]] = {}
    for key in keys:
        values = [v for v in (number(r.overheads.get(key)) for r in results) if v is not None]
        if values:
            combined[key] = statistics.median(values)
            samples[key] = values
        else:
            other = next((v for r in results if (v := r.overheads.get(key)) is not None), None)
            combined[key] = other
    return combined, (samples if len(results) > 1 else None)
