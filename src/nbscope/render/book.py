"""Terminal and markdown views of the book-level views: the slowest cells of a book, lecture by lecture."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from nbscope._units import count
from nbscope.render._clean import markdown_with_code as prose
from nbscope.render._markdown import markdown_table
from nbscope.render._markdown import table_cell as _md
from nbscope.render._rows import Column, Item, Rows
from nbscope.render.terminal import TIME_COLUMNS, cell_columns, console, format_seconds, literal, terminal_table

if TYPE_CHECKING:
    from nbscope.analyse.book import LectureRow, Lectures, LectureSide, RunSet, SlowestCells

CELL_COLUMNS = (
    Column("notebook", "left", "path", min_width=14),
    *cell_columns(),
    *TIME_COLUMNS,
    Column("share", "right", "number"),
    Column("on", "left", "number", optional=True, in_markdown=False),
)
RUN_COLUMN = Column("run", "right", "number")  # first, where the rows come from more than one run
LECTURE_COLUMNS = (
    Column("notebook", "left", "path", min_width=16),
    Column("A", "right", "number"),
    Column("B", "right", "number"),
    Column("winner", "left", "number"),
    Column("A compile", "right", "number"),
    Column("B compile", "right", "number"),
    Column("runs", "left", "number"),  # which run each side's figures are from
)


def _share(value: float | None) -> str:
    return f"{value:.0%}" if isinstance(value, float) else "–"


def _cells_title(data: SlowestCells) -> str:
    """``slowest 15 of 16 cells in 2 runs of 1 notebook (share: of its run)``."""
    runs = f"{count(data.runs, 'run')} of " if data.runs != data.notebooks else ""
    head = f"slowest {len(data.rows)} of {count(data.cells, 'cell')} in {runs}{count(data.notebooks, 'notebook')}"
    if data.share_of == "run":
        return head + " (share: of its run)"
    return head + f": {format_seconds(data.shown_wall_s)} of {format_seconds(data.wall_s)}"


def cells_rows(data: SlowestCells) -> Rows:
    """The slowest cells' table, once for both formats: a row per cell, with a run column first where the rows
    come from more than one run and the backend last where they ran on more than one."""
    several = len({row.backend for row in data.rows}) > 1
    with_run = data.runs > 1
    rows = [
        (
            *([str(row.run_id if row.run_id is not None else "–")] if with_run else []),
            Item(row.target, code=True),
            str(row.cell),
            str(row.line or ""),
            Item(row.source, code=True),
            format_seconds(row.wall_s),
            format_seconds(row.compile_s) if row.compile_s else "–",
            format_seconds(row.run_s),
            _share(row.share),
            str(row.backend or "") if several else "",
        )
        for row in data.rows
    ]
    columns = ([RUN_COLUMN] if with_run else []) + list(CELL_COLUMNS)
    return Rows.of(columns, rows, title=_cells_title(data))


def print_cells(data: SlowestCells) -> None:
    """The slowest cells across the runs, with each cell's share of the total wall time (of its own run where
    a notebook has several); a run column where the rows come from more than one run."""
    console.print(terminal_table(cells_rows(data)))
    _print_missing(data.sets)


def cells_markdown(data: SlowestCells) -> str:
    lines = [f"### nbscope cells: {prose(_cells_title(data))}", "", *markdown_table(cells_rows(data))]
    return "\n".join(lines) + "\n"


def _side_wall(side: LectureSide | None, key: str = "wall_s") -> str:
    if not side:
        return "–"
    text = format_seconds(side.wall_s if key == "wall_s" else side.compile_s)
    if key == "wall_s" and side.status != "ok":
        text += f" ({side.status})"
    return text


def _side_title(name: str, data: Lectures) -> str:
    sides = [row.a if name == "A" else row.b for row in data.rows]
    run_set = data.a if name == "A" else data.b
    backends = sorted({side.backend or "?" for side in sides if side})
    return f"{name} = {run_set.name}" + (f" ({', '.join(backends)})" if backends else "")


def lectures_rows(data: Lectures) -> Rows:
    """The lecture-by-lecture table, once for both formats: a row per notebook, A's and B's wall time, the
    winner, the compile time of each, and the runs the figures are from."""
    rows = [
        (
            Item(row.target, code=True),
            _side_wall(row.a),
            _side_wall(row.b),
            row.winner.text or "–",
            _side_wall(row.a, "compile_s"),
            _side_wall(row.b, "compile_s"),
            _runs(row),
        )
        for row in data.rows
    ]
    return Rows.of(LECTURE_COLUMNS, rows, title="lecture by lecture")


def print_lectures(data: Lectures) -> None:
    """A row per notebook: A's and B's wall time, the winner, and the compile time of each."""
    console.print(f"[bold]{literal(_side_title('A', data))}[/bold]")
    console.print(f"[bold]{literal(_side_title('B', data))}[/bold]")
    console.print(terminal_table(lectures_rows(data)))
    console.print(literal(_summary(data)))
    _print_missing([data.a, data.b])


def _runs(row: LectureRow) -> str:
    """``4 vs 9``: the run of A and the run of B a row's figures are from (``–`` for a side without one)."""
    return " vs ".join(str((side.run_id if side else None) or "–") for side in (row.a, row.b))


def _summary(data: Lectures) -> str:
    if not data.paired:
        return "no notebook is in both sets"
    paired, wins = data.paired, data.wins
    return (
        f"{count(paired, 'notebook')} in both: A {format_seconds(data.a_wall_s)}, "
        f"B {format_seconds(data.b_wall_s)} ({data.winner.text if data.winner else '–'}); "
        f"A faster in {wins['A']}, B in {wins['B']}, ties {wins['tie']}"
    )


def lectures_markdown(data: Lectures) -> str:
    lines = [
        f"### nbscope lectures: A = {prose(data.a.name)} vs B = {prose(data.b.name)}",
        "",
        *markdown_table(lectures_rows(data)),
        "",
        _md(_summary(data)),
    ]
    return "\n".join(lines) + "\n"


def _print_missing(sets: Sequence[RunSet]) -> None:
    for run_set in sets:
        missing = run_set.missing
        if missing:
            shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
            console.print(f"[yellow]{literal(run_set.name)}: no run for {len(missing)}: {literal(shown)}[/yellow]")
