"""Views of a ``pathways`` record: per-pathway totals and fixed costs, per-cell walls side by side."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from nbscope._units import count
from nbscope.record.run import RunRecord
from nbscope.render._clean import markdown_with_code as prose
from nbscope.render._markdown import markdown_table
from nbscope.render._markdown import table_cell as _md
from nbscope.render._rows import Column, Item, Rows
from nbscope.render.terminal import (
    cell_columns,
    console,
    format_seconds,
    literal,
    print_record_header,
    stderr_console,
    terminal_table,
)
from nbscope.schema.codec import decode
from nbscope.schema.pathways import BenchFigure, PathwayEntry, PathwayRow, PathwaysRun
from nbscope.schema.progress import PathwayProgress

# Each pathway's fixed cost outside the cells, in the order shown.
OVERHEAD_LABELS = (
    ("process_start_s", "process start"),
    ("kernel_start_s", "kernel start"),
    ("book_outside_execution_s", "book outside execution"),
    ("server_start_s", "of which Jupyter server start"),
    ("exit_after_log_s", "of which exit after its log ends"),
    ("execution_outside_cells_s", "book kernel start + messaging"),
    ("shutdown_s", "shutdown"),
)


def overheads_text(entry: PathwayEntry) -> str:
    """A pathway's fixed costs outside the cells: ``process start 0.40 s · shutdown 10.0 ms``."""
    costs = entry.fixed_costs
    parts = [f"{label} {format_seconds(costs[key])}" for key, label in OVERHEAD_LABELS if key in costs]
    return " · ".join(parts) or "–"


def _pathway_note(entry: PathwayEntry) -> str:
    if entry.skipped:
        return f"skipped: {entry.skipped}"
    if entry.error:
        return f"error: {entry.error}"
    executed = entry.fixed_costs.get("book_executed_s")
    if executed is not None:
        return f"book log: executed in {format_seconds(executed)}"
    return ""


def _cell_flag(row: PathwayRow) -> Item:
    if row.ran_differently:
        return Item(", ".join(f"{n} {e.status}" for n, e in row.by_pathway.items()), "yellow")
    if row.compared and row.differs:
        return Item(f"{row.slowest} slower by {format_seconds(row.delta_s)}", "red")
    statuses = {e.status for e in row.by_pathway.values()}
    if statuses and statuses != {"ok"}:
        return Item("/".join(sorted(str(s) for s in statuses)))
    return Item()


def _pathway_column(name: str) -> Column:
    # A pathway's figure ("wall (compile)") is never split; the source gives way.
    return Column(literal(name), "right", "number", markdown=name)


def _with_bracket(value: float | None, bracketed: float | None) -> str:
    """``value`` in seconds, and ``bracketed`` after it in brackets when there is one."""
    text = format_seconds(value)
    return f"{text} ({format_seconds(bracketed)})" if bracketed else text


PATHWAY_COLUMNS = (
    Column("pathway", "left", "number"),
    Column("status", "left", "number"),
    Column("cells", "right", "number"),
    Column("compile", "right", "number"),
    Column("elapsed", "right", "number"),
    Column("fixed costs outside cells", "left", "parts", min_width=16),
    Column("note", "left", "text", optional=True),
)


def pathway_rows(run: PathwaysRun) -> Rows:
    """A row per pathway: its cells' wall and compile time, its elapsed time and its fixed costs."""
    rows = []
    for name, entry in run.pathways.items():
        totals = entry.figures
        rows.append(
            (
                name,
                str(entry.status),
                format_seconds(totals.wall_s),
                format_seconds(totals.compile_s) if totals.compile_s else "–",
                format_seconds(entry.elapsed),
                overheads_text(entry),
                _pathway_note(entry),
            )
        )
    return Rows.of(PATHWAY_COLUMNS, rows, title="pathways")


def cell_rows(run: PathwaysRun) -> Rows:
    """A row per cell: its wall time in each pathway that ran (compile in brackets), and how they differ."""
    names = run.ran
    number, line, source = cell_columns("#")
    columns = [
        replace(number, markdown="Cell"),
        line,
        source,
        *map(_pathway_column, names),
        Column("note", "left", "text", optional=True),
    ]
    rows = []
    for row in run.cells:
        entries = [row.in_pathway(name) for name in names]
        rows.append(
            (
                str((row.index or 0) + 1),
                str(row.line or ""),
                Item(row.first_line or "", code=True),
                *(_with_bracket(e.wall_s, e.compile_s) if e else _with_bracket(None, None) for e in entries),
                _cell_flag(row),
            )
        )
    return Rows.of(columns, rows, title="cells (wall; compile in brackets)")


def figure_rows(figures: Sequence[BenchFigure], names: list[str]) -> Rows:
    """A row per bench figure: its steady median in each pathway (first call in brackets)."""
    columns = [
        Column("figure", "left", "source", min_width=14),
        *map(_pathway_column, names),
        Column("note", "left", "number", optional=True),
    ]
    rows = []
    for figure in figures:
        entries = [figure.in_pathway(name) for name in names]
        rows.append(
            (
                figure.label or figure.key,
                *(_with_bracket(e.median_s, e.first_s) if e else _with_bracket(None, None) for e in entries),
                Item(f"differs ×{figure.ratio:.2f}", "red") if figure.differs and figure.ratio is not None else "",
            )
        )
    return Rows.of(columns, rows, title="bench figures (steady median; first call in brackets)")


def _run(record: RunRecord, run: PathwaysRun | None) -> PathwaysRun:
    """The record's typed measurements: as the command decoded them once, else read from the record."""
    return run if run is not None else decode(PathwaysRun, record.measurements)


def print_pathways(record: RunRecord, run: PathwaysRun | None = None) -> None:
    """Terminal view: pathways table, cells side by side, then the verdict."""
    print_record_header(record)
    run = _run(record, run)
    console.print(terminal_table(pathway_rows(run)))
    console.print(terminal_table(cell_rows(run)))
    names = run.ran
    totals = run.totals
    console.print(
        f"{totals.cells_paired}/{totals.cells} cells paired across {count(len(names), 'pathway')}, "
        f"{totals.cells_compared} compared, {totals.cells_differing} differ beyond noise · "
        f"whole run {format_seconds(totals.wall_s)}"
    )
    if run.figures:
        console.print(terminal_table(figure_rows(run.figures, names)))
    console.print(f"[bold]verdict:[/bold] {literal(run.verdict)}")


def pathways_markdown(record: RunRecord, run: PathwaysRun | None = None) -> str:
    """GitHub-ready tables: pathways with their fixed costs, then cells side by side, then the verdict."""
    run = _run(record, run)
    lines = [
        f"### nbscope pathways: `{_md(record.target)}`",
        "",
        f"**Verdict:** {prose(run.verdict)}",
        "",
        *markdown_table(pathway_rows(run)),
        "",
        "Cells: wall time in each pathway, compile time in brackets.",
        "",
        *markdown_table(cell_rows(run)),
    ]
    if run.figures:
        lines += [
            "",
            "Bench figures: steady median in each pathway, first call in brackets.",
            "",
            *markdown_table(figure_rows(run.figures, run.ran)),
        ]
    return "\n".join(lines) + "\n"


def pathways_progress() -> Callable[[PathwayProgress], None]:
    """Progress lines on stderr, so --json and --markdown output stays clean on stdout."""
    status = stderr_console()

    def progress(event: PathwayProgress) -> None:
        run = f" (repeat {event.repeat + 1})" if event.repeat else ""
        if event.event == "start":
            status.print(f"[dim]pathways: {event.pathway}{run} …[/dim]")
        elif event.status != "ok":
            why = f" – {literal(event.reason)}" if event.reason else ""  # a partial run's cells say why
            status.print(f"[dim]pathways: {event.pathway}{run}: {event.status}{why}[/dim]")

    return progress


def emit_pathways(
    record: RunRecord, run: PathwaysRun | None = None, *, as_json: bool, markdown: bool, store_path: object = None
) -> None:
    """A pathways record as JSON, markdown or tables."""
    if as_json:
        print(record.to_json())
    elif markdown:
        print(pathways_markdown(record, run), end="")
    else:
        print_pathways(record, run)
        if store_path is not None and record.run_id is not None:
            console.print(f"[dim]saved as run {record.run_id} in {store_path}[/dim]")
