"""Views of a ``pathways`` record: per-pathway totals and fixed costs, per-cell walls side by side."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from nbscope._units import count
from nbscope.record.run import RunRecord
from nbscope.render._markdown import table_cell as _md
from nbscope.render.terminal import (
    Column,
    cell_columns,
    console,
    fitted_table,
    format_seconds,
    literal,
    print_record_header,
    source_text,
)

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


def _elapsed(entry: dict[str, Any]) -> Any:
    if entry.get("elapsed_s") is not None:
        return entry["elapsed_s"]
    runner = entry.get("runner") or {}
    return runner.get("build_s") if runner.get("build_s") is not None else runner.get("total_s")


def _compile(totals: dict[str, Any]) -> str:
    return format_seconds(totals.get("compile_s")) if totals.get("compile_s") else "–"


def overheads_text(entry: dict[str, Any]) -> str:
    overheads = entry.get("overheads") or {}
    parts = [f"{label} {format_seconds(overheads[key])}" for key, label in OVERHEAD_LABELS
             if isinstance(overheads.get(key), (int, float))]
    return ", ".join(parts) or "–"


def _pathway_note(entry: dict[str, Any]) -> str:
    if entry.get("skipped"):
        return f"skipped: {entry['skipped']}"
    if entry.get("error"):
        return f"error: {entry['error']}"
    executed = (entry.get("overheads") or {}).get("book_executed_s")
    if isinstance(executed, (int, float)):
        return f"book log: executed in {format_seconds(executed)}"
    return ""


def _cell_flag(row: dict[str, Any], *, markup: bool) -> str:
    if row.get("ran_differently"):
        statuses = ", ".join(f"{n} {e.get('status')}" for n, e in row["by_pathway"].items())
        return f"[yellow]{literal(statuses)}[/yellow]" if markup else statuses
    if row.get("compared") and row.get("differs"):
        text = f"{row['slowest']} slower by {format_seconds(row.get('delta_s'))}"
        return f"[red]{literal(text)}[/red]" if markup else text
    statuses = {e.get("status") for e in row["by_pathway"].values()}
    if statuses and statuses != {"ok"}:
        text = "/".join(sorted(str(s) for s in statuses))
        return literal(text) if markup else text
    return ""


def _names(record: RunRecord) -> list[str]:
    pathways = record.measurements.get("pathways") or {}
    return [n for n, e in pathways.items() if e.get("status") not in ("skipped", "error", "not-run")]


def print_pathways(record: RunRecord) -> None:
    """Terminal view: pathways table, cells side by side, then the verdict."""
    print_record_header(record)
    m = record.measurements
    pathways = m.get("pathways") or {}
    columns = [Column("pathway", "left", "number"), Column("status", "left", "number"),
               Column("cells", "right", "number"), Column("compile", "right", "number"),
               Column("elapsed", "right", "number"), Column("fixed costs outside cells", "left", "parts", min_width=16),
               Column("note", "left", "text", optional=True)]
    rows = []
    for name, entry in pathways.items():
        totals = entry.get("totals") or {}
        rows.append([
            literal(name), literal(entry.get("status")), format_seconds(totals.get("wall_s")), _compile(totals),
            format_seconds(_elapsed(entry)), literal(overheads_text(entry).replace(", ", " · ")),
            literal(_pathway_note(entry)),
        ])
    console.print(fitted_table(columns, rows, title="pathways"))
    names = _names(record)
    # Each pathway's column holds "wall (compile)": a figure, never split; the source gives way.
    cell_cols = [*cell_columns("#"), *(Column(literal(name), "right", "number") for name in names),
                 Column("note", "left", "text", optional=True)]
    cell_rows = []
    for row in m.get("cells") or []:
        values = []
        for name in names:
            entry = row["by_pathway"].get(name) or {}
            text = format_seconds(entry.get("wall_s"))
            if entry.get("compile_s"):
                text += f" [dim]({format_seconds(entry['compile_s'])})[/dim]"
            values.append(text)
        cell_rows.append([str(int(row.get("index") or 0) + 1), literal(row.get("line") or ""),
                          source_text(row.get("first_line") or ""), *values, _cell_flag(row, markup=True)])
    console.print(fitted_table(cell_cols, cell_rows, title="cells (wall; compile in brackets)"))
    totals = m.get("totals") or {}
    console.print(
        f"{totals.get('cells_paired', 0)}/{totals.get('cells', 0)} cells paired across {count(len(names), 'pathway')}, "
        f"{totals.get('cells_compared', 0)} compared, {totals.get('cells_differing', 0)} differ beyond noise · "
        f"whole run {format_seconds(totals.get('wall_s'))}"
    )
    figures = m.get("figures")
    if figures:
        print_figures(figures, names)
    console.print(f"[bold]verdict:[/bold] {literal(m.get('verdict', ''))}")


def print_figures(figures: list[dict[str, Any]], names: list[str]) -> None:
    """Bench figures (steady-state medians) per pathway, for ``nbscope bench --pathway``."""
    columns = [Column("figure", "left", "source", min_width=14), *(Column(literal(n), "right", "number") for n in names),
               Column("note", "left", "number", optional=True)]
    rows = []
    for figure in figures:
        values = []
        for name in names:
            entry = figure["by_pathway"].get(name) or {}
            text = format_seconds(entry.get("median_s"))
            if entry.get("first_s") is not None:
                text += f" [dim]({format_seconds(entry['first_s'])})[/dim]"
            values.append(text)
        note = f"[red]differs ×{figure['ratio']:.2f}[/red]" if figure.get("differs") else ""
        rows.append([source_text(str(figure.get("label") or figure.get("key"))), *values, note])
    console.print(fitted_table(columns, rows, title="bench figures (steady median; first call in brackets)"))


def pathways_markdown(record: RunRecord) -> str:
    """GitHub-ready tables: pathways with their fixed costs, then cells side by side, then the verdict."""
    m = record.measurements
    pathways = m.get("pathways") or {}
    names = _names(record)
    lines = [
        f"### nbscope pathways: `{_md(record.target)}`",
        "",
        f"**Verdict:** {_md(m.get('verdict', ''))}",
        "",
        "| Pathway | Status | Cells | Compile | Elapsed | Fixed costs outside cells | Note |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for name, entry in pathways.items():
        totals = entry.get("totals") or {}
        lines.append(
            f"| {name} | {entry.get('status')} | {format_seconds(totals.get('wall_s'))} | "
            f"{_compile(totals)} | {format_seconds(_elapsed(entry))} | "
            f"{_md(overheads_text(entry))} | {_md(_pathway_note(entry))} |"
        )
    lines += ["", "| Cell | Line | Source | " + " | ".join(names) + " | Note |",
              "|---:|---:|---|" + "---:|" * len(names) + "---|"]
    for row in m.get("cells") or []:
        values = [format_seconds((row["by_pathway"].get(n) or {}).get("wall_s")) for n in names]
        lines.append(
            f"| {int(row.get('index') or 0) + 1} | {row.get('line') or ''} | `{_md((row.get('first_line') or '')[:60])}` | "
            + " | ".join(values) + f" | {_md(_cell_flag(row, markup=False))} |"
        )
    figures = m.get("figures")
    if figures:
        lines += ["", "| Figure | " + " | ".join(names) + " | Note |", "|---|" + "---:|" * len(names) + "---|"]
        for figure in figures:
            values = [format_seconds((figure["by_pathway"].get(n) or {}).get("median_s")) for n in names]
            note = f"differs ×{figure['ratio']:.2f}" if figure.get("differs") else ""
            lines.append(f"| {_md(figure.get('label') or figure.get('key'))} | " + " | ".join(values) + f" | {note} |")
    return "\n".join(lines) + "\n"


def pathways_progress() -> Any:
    """Progress lines on stderr, so --json and --markdown output stays clean on stdout."""
    status = Console(stderr=True, highlight=False)

    def progress(event: str, payload: dict[str, Any]) -> None:
        run = f" (repeat {payload['repeat'] + 1})" if payload.get("repeat") else ""
        if event == "start":
            status.print(f"[dim]pathways: {payload['pathway']}{run} …[/dim]")
        elif payload.get("status") != "ok":
            status.print(f"[dim]pathways: {payload['pathway']}{run}: {payload['status']} – {payload.get('reason')}[/dim]")

    return progress


def emit_pathways(record: Any, *, as_json: bool, markdown: bool, store_path: Any = None) -> None:
    """A pathways record as JSON, markdown or tables."""
    if as_json:
        print(record.to_json())
    elif markdown:
        print(pathways_markdown(record), end="")
    else:
        print_pathways(record)
        if store_path is not None and record.run_id is not None:
            console.print(f"[dim]saved as run {record.run_id} in {store_path}[/dim]")
