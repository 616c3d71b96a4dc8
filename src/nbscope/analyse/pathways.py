"""Pairing cells across pathways, deciding what differs beyond noise, and the one-line verdict; and the typed
view of a ``pathways`` record (:class:`PathwaysRun`) that its renderers read."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbscope._units import seconds
from nbscope.record import cells as cell_model
from nbscope.schema._fields import number as _number
from nbscope.schema._fields import text as _text
from nbscope.schema.codec import decode
from nbscope.schema.model import Cell, Totals

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
NOT_RAN = ("skipped", "error", "not-run")  # statuses of a pathway that measured nothing






def _numbers(value: Any) -> Mapping[str, float]:
    """The numbers of an object of figures (``overheads``), by name."""
    if not isinstance(value, Mapping):
        return {}
    return {str(k): n for k, n in ((k, _number(v)) for k, v in value.items()) if n is not None}


# ---- the typed view of a pathways record ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PathwayCell:
    """A cell's figures in one pathway (a row's ``by_pathway[name]``)."""

    wall_s: float | None
    compile_s: float | None
    run_s: float | None
    status: str | None
    compiles: int  # JAX and Numba
    error: str | None = None  # the error's name, for a cell that raised
    has_error: bool = False  # the cell recorded an error (its name may be unknown)
    skip_reason: str | None = None  # why the pathway skipped it (a kernel-only magic in a script)
    samples: tuple[float, ...] = ()  # each repeat's wall, when there were several
    spread: float | None = None

    @classmethod
    def of(cls, cell: Cell, skip_reason: str | None) -> PathwayCell:
        """From a typed cell of a pathway's run (``skip_reason``: the runner's, which the cell model lacks)."""
        walls = cell.samples.wall_s if cell.samples is not None else ()
        return cls(
            wall_s=cell.wall_s, compile_s=cell.compile_s, run_s=cell.run_s, status=cell.status,
            compiles=(cell.jax.compiles if cell.jax else 0) + (cell.numba.compiles if cell.numba else 0),
            error=(cell.error.name or None) if cell.error else None, has_error=cell.error is not None,
            skip_reason=skip_reason, samples=walls if len(walls) > 1 else (),
            spread=cell.spread if len(walls) > 1 else None,
        )

    @classmethod
    def parse(cls, value: Any) -> PathwayCell:
        """From a stored row's entry (fields a record lacks read as unknown)."""
        value = value if isinstance(value, Mapping) else {}
        samples = [n for n in (_number(s) for s in value.get("samples") or ()) if n is not None]
        return cls(wall_s=_number(value.get("wall_s")), compile_s=_number(value.get("compile_s")),
                   run_s=_number(value.get("run_s")), status=_text(value.get("status")),
                   compiles=int(_number(value.get("compiles")) or 0), error=_text(value.get("error")),
                   has_error="error" in value, skip_reason=_text(value.get("skip_reason")),
                   samples=tuple(samples), spread=_number(value.get("spread")))

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"wall_s": self.wall_s, "compile_s": self.compile_s, "run_s": self.run_s,
                                 "status": self.status, "compiles": self.compiles}
        if self.has_error:
            entry["error"] = self.error
        if self.skip_reason:
            entry["skip_reason"] = self.skip_reason
        if len(self.samples) > 1:
            entry["samples"] = list(self.samples)
            entry["spread"] = self.spread
        return entry


@dataclass(frozen=True, slots=True)
class PathwayRow:
    """A code cell of the notebook with its figures in each pathway that ran it, and whether they differ."""

    source_hash: str | None
    index: int | None
    line: int | None
    first_line: str | None
    by_pathway: Mapping[str, PathwayCell]
    paired: bool  # every pathway that ran has the cell
    compared: bool  # it ran cleanly in every pathway that has it, and in two or more
    differs: bool  # the walls differ beyond the tolerance
    ran_differently: bool  # its status is not the same in every pathway
    delta_s: float | None = None  # slowest less fastest wall, when two or more ran cleanly
    tolerance_s: float | None = None
    slowest: str | None = None
    fastest: str | None = None

    @property
    def label(self) -> str:
        """``cell 3 (line 41)``, as the cell model names cells."""
        name = f"cell {self.index + 1}" if self.index is not None else "cell ?"
        return f"{name} (line {self.line})" if self.line else name

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> PathwayRow:
        by_pathway = value.get("by_pathway")
        index, line = value.get("index"), value.get("line")
        return cls(
            source_hash=_text(value.get("source_hash")),
            index=index if isinstance(index, int) and not isinstance(index, bool) else None,
            line=line if isinstance(line, int) and not isinstance(line, bool) else None,
            first_line=_text(value.get("first_line")),
            by_pathway={str(n): PathwayCell.parse(e) for n, e in by_pathway.items()}
            if isinstance(by_pathway, Mapping) else {},
            paired=bool(value.get("paired")), compared=bool(value.get("compared")),
            differs=bool(value.get("differs")), ran_differently=bool(value.get("ran_differently")),
            delta_s=_number(value.get("delta_s")), tolerance_s=_number(value.get("tolerance_s")),
            slowest=_text(value.get("slowest")), fastest=_text(value.get("fastest")),
        )

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "source_hash": self.source_hash, "index": self.index, "line": self.line, "first_line": self.first_line,
            "by_pathway": {name: entry.to_dict() for name, entry in self.by_pathway.items()},
            "paired": self.paired, "compared": self.compared, "differs": self.differs,
        }
        if self.delta_s is not None:
            row.update(delta_s=self.delta_s, tolerance_s=self.tolerance_s, slowest=self.slowest, fastest=self.fastest)
        row["ran_differently"] = self.ran_differently
        return row


@dataclass(frozen=True, slots=True)
class PathwayEntry:
    """One pathway of a record (``pathways[name]``): how it ran, its totals and its fixed costs."""

    status: str | None
    totals: Totals  # as a profile's
    overheads: Mapping[str, float]  # fixed costs outside the cells (process_start_s, kernel_start_s, ...)
    elapsed_s: float | None  # spawn (or build command) to exit: the runner's, when the entry has none
    skipped: str | None = None  # why it did not run
    error: str | None = None
    # Every total as recorded, in its order: the report's table shows them all, whatever the pathway added to a
    # profile's (``process_start_s``, ``book_build_s``, ...), and ``totals`` types only a profile's.
    recorded_totals: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        return self.status not in NOT_RAN

    @classmethod
    def parse(cls, value: Any) -> PathwayEntry:
        value = value if isinstance(value, Mapping) else {}
        runner = value.get("runner") if isinstance(value.get("runner"), Mapping) else {}
        elapsed = _number(value.get("elapsed_s"))
        if elapsed is None:
            elapsed = _number(runner.get("build_s")) if runner.get("build_s") is not None else _number(runner.get("total_s"))
        totals = value.get("totals")
        return cls(status=_text(value.get("status")), totals=decode(Totals, totals),
                   overheads=_numbers(value.get("overheads")), elapsed_s=elapsed,
                   skipped=_text(value.get("skipped")), error=_text(value.get("error")),
                   recorded_totals=totals if isinstance(totals, Mapping) else {})


@dataclass(frozen=True, slots=True)
class FigureEntry:
    """A bench figure in one pathway: its steady median and first call."""

    median_s: float | None
    first_s: float | None


@dataclass(frozen=True, slots=True)
class BenchFigure:
    """A bench figure through the pathways (``nbscope bench --pathway``)."""

    key: str
    label: str | None
    by_pathway: Mapping[str, FigureEntry]
    differs: bool
    ratio: float | None

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> BenchFigure:
        raw = value.get("by_pathway")
        by_pathway: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        return cls(key=str(value.get("key")), label=_text(value.get("label")) or None,
                   by_pathway={str(n): FigureEntry(median_s=_number((e or {}).get("median_s")),
                                                   first_s=_number((e or {}).get("first_s")))
                               for n, e in by_pathway.items()},
                   differs=bool(value.get("differs")), ratio=_number(value.get("ratio")))


@dataclass(frozen=True, slots=True)
class PathwaysTotals:
    cells: int
    cells_paired: int
    cells_compared: int
    cells_differing: int
    wall_s: float | None  # the whole run

    @classmethod
    def parse(cls, value: Any) -> PathwaysTotals:
        value = value if isinstance(value, Mapping) else {}

        def count(key: str) -> int:
            return int(_number(value.get(key)) or 0)

        return cls(cells=count("cells"), cells_paired=count("cells_paired"), cells_compared=count("cells_compared"),
                   cells_differing=count("cells_differing"), wall_s=_number(value.get("wall_s")))


@dataclass(frozen=True, slots=True)
class PathwaysRun:
    """The measurements of a ``pathways`` record, typed (format: ``nbscope.api.pathways``)."""

    pathways: Mapping[str, PathwayEntry]
    cells: tuple[PathwayRow, ...]
    totals: PathwaysTotals
    verdict: str
    figures: tuple[BenchFigure, ...]

    @property
    def ran(self) -> list[str]:
        """The pathways that measured the notebook, in the record's order."""
        return [name for name, entry in self.pathways.items() if entry.ran]

    @classmethod
    def parse(cls, measurements: Mapping[str, Any]) -> PathwaysRun:
        pathways = measurements.get("pathways")
        return cls(
            pathways={str(n): PathwayEntry.parse(e) for n, e in pathways.items()} if isinstance(pathways, Mapping) else {},
            cells=tuple(PathwayRow.parse(c) for c in measurements.get("cells") or () if isinstance(c, Mapping)),
            totals=PathwaysTotals.parse(measurements.get("totals")),
            verdict=str(measurements.get("verdict") or ""),
            figures=tuple(BenchFigure.parse(f) for f in measurements.get("figures") or () if isinstance(f, Mapping)),
        )


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


def _typed(cells: Sequence[Mapping[str, Any]]) -> list[tuple[Cell, str | None]]:
    """A run's cell documents as typed cells, each with the runner's ``skip_reason`` (not in the cell model)."""
    return [(decode(Cell, c), _text(c.get("skip_reason"))) for c in cells]


def pair_cells(reference: Sequence[Mapping[str, Any]], results: Mapping[str, Any]) -> list[PathwayRow]:
    """One row per code cell of ``reference`` (the notebook's cells) with each pathway's figures
    (``results`` maps a pathway's name to its result, whose ``cells`` ran that notebook)."""
    notebook = [cell for cell, _ in _typed(reference)]
    ran: dict[str, dict[int, PathwayCell]] = {}
    for name, result in results.items():
        if not result.cells:
            continue
        cells = _typed(result.cells)
        reasons = {id(cell): reason for cell, reason in cells}
        ran[name] = {id(p.a): PathwayCell.of(p.b, reasons[id(p.b)])
                     for p in cell_model.pair_cells(notebook, [cell for cell, _ in cells])
                     if p.match == "hash" and p.a is not None and p.b is not None}
    return [_row(cell, {name: paired[id(cell)] for name, paired in ran.items() if id(cell) in paired}, len(ran))
            for cell in notebook]


def _row(cell: Cell, by_pathway: dict[str, PathwayCell], pathways: int) -> PathwayRow:
    comparable = {n: e for n, e in by_pathway.items() if e.status in COMPARABLE and e.wall_s is not None}
    figures: dict[str, Any] = {}
    if len(comparable) >= 2:
        walls = {n: e.wall_s for n, e in comparable.items() if e.wall_s is not None}
        fastest, slowest = min(walls, key=walls.__getitem__), max(walls, key=walls.__getitem__)
        delta, allowed = walls[slowest] - walls[fastest], tolerance(list(comparable.values()))
        figures = {"delta_s": delta, "tolerance_s": allowed, "differs": delta > allowed,
                   "slowest": slowest, "fastest": fastest}
    return PathwayRow(
        source_hash=cell.source_hash or None, index=cell.index, line=cell.line, first_line=cell.first_line,
        by_pathway=by_pathway, paired=len(by_pathway) == pathways and pathways > 0,
        compared=len(comparable) >= 2 and len(comparable) == len(by_pathway),
        differs=figures.pop("differs", False), ran_differently=len({e.status for e in by_pathway.values()}) > 1,
        **figures,
    )


def _entries(pathways: Mapping[str, Any]) -> dict[str, PathwayEntry]:
    # The record's ``pathways`` object (as built, or stored), or entries already typed.
    return {name: e if isinstance(e, PathwayEntry) else PathwayEntry.parse(e) for name, e in pathways.items()}


def fixed_overheads(pathways: Mapping[str, Any]) -> list[str]:
    parts = []
    for name, entry in _entries(pathways).items():
        for key, label in OVERHEAD_NAMES.items():
            value = entry.overheads.get(key)
            if value is not None:
                parts.append(f"{label} {seconds(value)} ({name})")
    return parts


def verdict(
    rows: Sequence[PathwayRow],
    pathways: Mapping[str, Any],
    *,
    repeat: int = 1,
    busy: tuple[float, int] | None = None,
) -> str:
    """One line: does the pathway explain a difference, and what are the fixed costs apart from cells.

    ``pathways``: the record's ``pathways`` entries (as documents, or :class:`PathwayEntry`). ``busy`` (load
    average, CPUs) says the machine had more runnable work than CPUs during the runs: then a difference may
    come from the other work, and the verdict says so.
    """
    entries = _entries(pathways)
    ran = [n for n, e in entries.items() if e.status not in ("skipped", "error")]
    not_run = [f"{n} {e.status}: {e.skipped or e.error}" for n, e in entries.items() if n not in ran]
    overheads = fixed_overheads({n: entries[n] for n in ran})
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
        slowest, fastest = row.by_pathway.get(row.slowest or ""), row.by_pathway.get(row.fastest or "")
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
