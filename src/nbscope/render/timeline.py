"""The per-cell device timeline table of a profile run with ``--timeline``."""

from __future__ import annotations

from nbscope.record.run import RunRecord
from nbscope.render.terminal import Column, console, fitted_table, format_seconds, literal, source_text


def print_timeline(record: RunRecord) -> None:
    """A per-cell table of the timeline summaries of a profile record (``--timeline``).

    A cell's summary is read as ``collect.timeline`` wrote it: the cell model keeps it as recorded."""
    cells = [c for c in record.notebook_run().cells if c.timeline]
    if not cells:
        console.print("[dim]timeline: no cell was traced (only cells after the notebook's own first JAX work are)[/dim]")
        return
    columns = [
        Column("cell", "right", "number"), Column("line", "right", "number", optional=True),
        Column("code time", "right", "number"), Column("device busy", "right", "number"),
        Column("ops", "right", "number"), Column("per op", "right", "number"),
        Column("dispatch", "right", "number"), Column("copies", "right", "number"),
        Column("waits", "right", "number"), Column("class", "left", "text", min_width=8),
        Column("longest op", "left", "source", min_width=10),
    ]
    rows = []
    for cell in cells:
        summary = cell.timeline or {}
        where = literal(cell.line or "")
        if summary.get("classification") is None:
            rows.append([str(cell.index + 1), where, "", "", "", "", "", "", "", "–",
                         source_text(str(summary.get("skipped") or summary.get("error") or ""))])
            continue
        top = (summary.get("top_ops") or [None])[0]
        transfers, syncs = summary.get("transfers") or {}, summary.get("syncs") or {}
        rows.append([
            str(cell.index + 1), where,
            format_seconds(summary.get("wall_s")),
            f"{format_seconds(summary.get('device_busy_s'))} ({(summary.get('device_busy_share') or 0):.0%})",
            str(summary.get("ops")),
            format_seconds(summary.get("mean_op_s")),
            f"{format_seconds(summary.get('dispatch_s'))} / {summary.get('dispatches')}",
            str(transfers.get("count", "")),
            str(syncs.get("count", "")),
            literal(summary["classification"]),
            source_text(f"{top['name']} {format_seconds(top['longest_s'])}×{top['count']}") if top else "",
        ])
    console.print(fitted_table(columns, rows, title="device timeline per cell"))
