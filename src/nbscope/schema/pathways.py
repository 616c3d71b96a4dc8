"""The typed model of a ``pathways`` record (``nbscope pathways``, ``nbscope bench --pathway``; format in
``nbscope.api.pathways``): each pathway's entry, the cells paired across pathways, the totals and the bench
figures, as frozen dataclasses written and read by ``schema.codec`` (``encode(run)`` gives the measurements as
stored, keys a document leaves out included; ``decode(PathwaysRun, record.measurements)`` reads them back).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from nbscope._units import number
from nbscope.schema.codec import Measured, Write, decode, known, never
from nbscope.schema.model import Cell, Totals

NOT_RAN = ("skipped", "error", "not-run")  # statuses of a pathway that measured nothing


# ---- a cell in each pathway ---------------------------------------------------------------------------------


def _no_error(cell: PathwayCell) -> bool:
    return not cell.has_error


def _not_skipped(cell: PathwayCell) -> bool:
    return not cell.skip_reason


def _single(cell: PathwayCell) -> bool:
    return len(cell.samples) <= 1


def _with_error_flag(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A stored cell entry, with whether it recorded an error (its name may be null)."""
    return {**value, "has_error": "error" in value}


@dataclass(frozen=True, slots=True)
class PathwayCell:
    """A cell's figures in one pathway (a row's ``by_pathway[name]``)."""

    wall_s: float | None
    compile_s: float | None
    run_s: float | None
    status: str | None
    compiles: int  # JAX and Numba
    error: Annotated[str | None, Write(omit=_no_error)] = None  # the error's name, for a cell that raised
    message: Annotated[str | None, Write(when=known)] = None  # and its message (None: not recorded)
    has_error: Annotated[bool, Write(when=never)] = False  # the cell recorded an error (its name may be unknown)
    skip_reason: Annotated[str | None, Write(omit=_not_skipped)] = None  # why the pathway skipped it
    samples: Annotated[tuple[float, ...], Write(omit=_single)] = ()  # each repeat's wall, when there were several
    spread: Annotated[float | None, Write(omit=_single)] = None

    reshape = staticmethod(_with_error_flag)

    @classmethod
    def of(cls, cell: Cell) -> PathwayCell:
        """From a typed cell of a pathway's run."""
        walls = cell.samples.wall_s if cell.samples is not None else ()
        return cls(
            wall_s=cell.wall_s,
            compile_s=cell.compile_s,
            run_s=cell.run_s,
            status=cell.status,
            compiles=(cell.jax.compiles if cell.jax else 0) + (cell.numba.compiles if cell.numba else 0),
            error=(cell.error.name or None) if cell.error else None,
            message=(cell.error.message or None) if cell.error else None,
            has_error=cell.error is not None,
            skip_reason=cell.skip_reason,
            samples=walls if len(walls) > 1 else (),
            spread=cell.spread if len(walls) > 1 else None,
        )


def _no_delta(row: PathwayRow) -> bool:
    return row.delta_s is None


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
    # slowest less fastest wall, when two or more ran cleanly, and how far apart they may be
    delta_s: Annotated[float | None, Write(omit=_no_delta)]
    tolerance_s: Annotated[float | None, Write(omit=_no_delta)]
    slowest: Annotated[str | None, Write(omit=_no_delta)]
    fastest: Annotated[str | None, Write(omit=_no_delta)]
    ran_differently: bool  # its status is not the same in every pathway

    def in_pathway(self, name: str) -> PathwayCell | None:
        """The cell's figures in pathway ``name``; None: that pathway has none (it did not run the cell)."""
        return self.by_pathway.get(name)

    @property
    def label(self) -> str:
        """``cell 3 (line 41)``, as the cell model names cells."""
        name = f"cell {self.index + 1}" if self.index is not None else "cell ?"
        return f"{name} (line {self.line})" if self.line else name


# ---- each pathway ------------------------------------------------------------------------------------------


def _not_combined(entry: PathwayEntry) -> bool:
    return entry.repeats is None


@dataclass(frozen=True, slots=True)
class PathwayRunner:
    """What a pathway's runner recorded of one run that is read back (``PathwayEntry.runner`` holds it as recorded):
    how long it took, and the load average before and after it."""

    build_s: float | None  # a book build: its command, spawn to exit
    total_s: float | None  # a kernel's or a script's run
    load_average: tuple[float, ...]  # the 1-minute load average before and after the run (those read)

    @property
    def elapsed(self) -> float | None:
        """Spawn (or build command) to exit."""
        return self.build_s if self.build_s is not None else self.total_s


@dataclass(frozen=True, slots=True)
class PathwayEntry:
    """One pathway of a record (``pathways[name]``): how it ran, its totals (as a profile's, plus what the pathway
    adds: ``process_start_s``, ``book_build_s``, ...), its runner's figures and its fixed costs outside the cells;
    over repeats, their count, the median elapsed time and each repeat's figures."""

    status: str | None
    totals: Mapping[str, Any]  # as recorded, in its order: the report's table shows them all
    runner: Mapping[str, Any]
    overheads: Mapping[str, Any]  # fixed costs outside the cells (process_start_s, kernel_start_s, ...)
    skipped: str | None  # why it did not run
    repeats: Annotated[int | None, Write(omit=_not_combined)] = None
    elapsed_s: Annotated[Measured, Write(omit=_not_combined)] = None  # spawn (or build command) to exit, median
    overhead_samples: Annotated[Mapping[str, Any] | None, Write(omit=lambda e: e.overhead_samples is None)] = None
    repeat_runners: Annotated[tuple[Mapping[str, Any], ...] | None, Write(omit=lambda e: e.repeat_runners is None)] = (
        None
    )
    error: Annotated[str | None, Write(omit=lambda e: e.error is None)] = None

    @property
    def ran(self) -> bool:
        return self.status not in NOT_RAN

    @property
    def figures(self) -> Totals:
        """The totals a profile has, typed."""
        return decode(Totals, self.totals)

    @property
    def fixed_costs(self) -> Mapping[str, float]:
        """The fixed costs that are numbers, by name."""
        return {str(k): n for k, n in ((k, number(v)) for k, v in self.overheads.items()) if n is not None}

    @property
    def elapsed(self) -> float | None:
        """Spawn (or build command) to exit: the entry's, else (an earlier record) its runner's."""
        if self.elapsed_s is not None:
            return float(self.elapsed_s)
        return decode(PathwayRunner, self.runner).elapsed


# ---- bench figures through the pathways ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FigureEntry:
    """A bench figure in one pathway: its steady median and spread, its first call (medians over repeats), and
    each repeat's median when there were several."""

    median_s: float | None
    spread: float | None
    first_s: float | None
    samples: tuple[float, ...] | None


def _one_pathway(figure: BenchFigure) -> bool:
    return figure.slowest is None


@dataclass(frozen=True, slots=True)
class BenchFigure:
    """A bench figure through the pathways (``nbscope bench --pathway``): whether its medians differ beyond
    noise, their ratio (slowest over fastest) and the slowest pathway."""

    key: str
    label: str | None
    group: str | None
    dtype: str | None
    by_pathway: Mapping[str, FigureEntry]
    differs: bool
    ratio: float | None
    slowest: Annotated[str | None, Write(omit=_one_pathway)] = None

    def in_pathway(self, name: str) -> FigureEntry | None:
        """The figure's medians in pathway ``name``; None: that pathway has none (it did not measure it)."""
        return self.by_pathway.get(name)


# ---- the whole record ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PathwaysTotals:
    cells: int
    cells_paired: int
    cells_compared: int
    cells_differing: int
    pathways: int
    pathways_ran: int
    pathways_skipped: int
    wall_s: float | None  # the whole run
    cells_wall_s: Mapping[str, Any]  # each pathway's cells that were compared, added up
    max_spread: float | None
    max_load_average: float | None
    cpus: int
    interrupted: bool
    figures: Annotated[int | None, Write(omit=lambda totals: totals.figures is None)] = None  # bench --pathway
    figures_differing: Annotated[int | None, Write(omit=lambda totals: totals.figures is None)] = None


@dataclass(frozen=True, slots=True)
class PathwaysRun:
    """The measurements of a ``pathways`` record (format: ``nbscope.api.pathways``)."""

    notebook: Mapping[str, Any]  # the notebook's description, as a profile's
    totals: PathwaysTotals
    pathways: Mapping[str, PathwayEntry]
    cells: tuple[PathwayRow, ...]
    verdict: str
    figures: Annotated[tuple[BenchFigure, ...], Write(omit=lambda run: not run.figures)] = ()  # bench --pathway

    @property
    def ran(self) -> list[str]:
        """The pathways that measured the notebook, in the record's order."""
        return [name for name, entry in self.pathways.items() if entry.ran]
