"""The per-cell device timeline table of a profile run with ``--timeline``."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from nbscope.render.terminal import console, format_seconds, literal


def print_timeline(record: Any) -> None:
    """A per-cell table of the timeline summaries of a profile record (``--timeline``)."""
    cells = [c for c in record.measurements.get("cells", []) if c.get("timeline")]
    if not cells:
        console.print("[dim]timeline: no cell was traced (only cells after the notebook's own first JAX work are)[/dim]")
        return
    table = Table(title="device timeline per cell")
    for column in ("cell", "line", "code time", "device busy", "ops", "per op", "dispatch", "copies", "waits",
                   "class", "longest op"):
        table.add_column(column, overflow="fold", no_wrap=column in ("cell", "line"))
    for cell in cells:
        summary = cell["timeline"]
        where = literal(cell.get("line") or "")
        if summary.get("classification") is None:
            table.add_row(str(cell["index"] + 1), where, "", "", "", "", "", "", "", "–",
                          literal(summary.get("skipped") or summary.get("error") or ""))
            continue
        top = (summary.get("top_ops") or [None])[0]
        transfers, syncs = summary.get("transfers") or {}, summary.get("syncs") or {}
        table.add_row(
            str(cell["index"] + 1), where,
            format_seconds(summary.get("wall_s")),
            f"{format_seconds(summary.get('device_busy_s'))} ({(summary.get('device_busy_share') or 0):.0%})",
            str(summary.get("ops")),
            format_seconds(summary.get("mean_op_s")),
            f"{format_seconds(summary.get('dispatch_s'))} / {summary.get('dispatches')}",
            str(transfers.get("count", "")),
            str(syncs.get("count", "")),
            literal(summary["classification"]),
            literal(f"{top['name']} {format_seconds(top['longest_s'])}×{top['count']}") if top else "",
        )
    console.print(table)
