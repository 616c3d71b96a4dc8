"""The per-cell device timeline table of a profile run with ``--timeline``."""

from __future__ import annotations

from nbscope.record.run import RunRecord
from nbscope.render.terminal import Column, console, fitted_table, format_seconds, literal, source_text
from nbscope.schema.timeline import OpCount


def _count(counted: OpCount | None) -> str:
    return "" if counted is None or counted.count is None else str(counted.count)


def print_timeline(record: RunRecord) -> None:
    """A per-cell table of the timeline summaries of a profile record (``--timeline``).

    A cell's summary is read as ``collect.timeline`` wrote it (the cell model's ``timeline_summary``)."""
    traced = [(c, c.timeline_summary) for c in record.notebook_run().cells if c.timeline_summary is not None]
    if not traced:
        console.print(
            "[dim]timeline: no cell was traced (only cells after the notebook's own first JAX work are)[/dim]"
        )
        return
    columns = [
        Column("cell", "right", "number"),
        Column("line", "right", "number", optional=True),
        *(
            Column(header, "right", "number")
            for header in ("code time", "device busy", "ops", "per op", "dispatch", "copies", "waits")
        ),
        Column("class", "left", "text", min_width=8),
        Column("longest op", "left", "source", min_width=10),
    ]
    rows = []
    for cell, summary in traced:
        where = literal(cell.line or "")
        if summary.classification is None:  # not traced: no figures, and why in the longest op's place
            rows.append(
                [str(cell.index + 1), where, *[""] * 7, "–", source_text(str(summary.skipped or summary.error or ""))]
            )
            continue
        top = summary.top_ops[0] if summary.top_ops else None
        rows.append(
            [
                str(cell.index + 1),
                where,
                format_seconds(summary.wall_s),
                f"{format_seconds(summary.device_busy_s)} ({(summary.device_busy_share or 0):.0%})",
                str(summary.ops),
                format_seconds(summary.mean_op_s),
                f"{format_seconds(summary.dispatch_s)} / {summary.dispatches}",
                _count(summary.transfers),
                _count(summary.syncs),
                literal(summary.classification),
                source_text(f"{top.name} {format_seconds(top.longest_s)}×{top.count}") if top else "",
            ]
        )
    console.print(fitted_table(columns, rows, title="device timeline per cell"))
