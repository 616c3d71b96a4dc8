"""What ``nbscope import-jupyter-cache`` prints: each run it stored (notebook, wall time, when it was executed)
and how many were there already, or the runs themselves as JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rich.markup import escape

from nbscope.record.run import RunRecord
from nbscope.render.terminal import console, format_seconds


def cache_import_json(records: Sequence[RunRecord], skipped: int) -> str:
    """The runs as run documents (each with its id in the store) and the count already stored."""
    return json.dumps(
        {"imported": [r.to_dict() | {"run_id": r.run_id} for r in records], "skipped": skipped}, indent=1, default=str
    )


def print_cache_import(records: Sequence[RunRecord], skipped: int, store_path: Path | None) -> None:
    for record in records:
        console.print(
            f"run {record.run_id}: {escape(record.target)} · {format_seconds(record.notebook_run().totals.wall_s)}"
            f" · executed {record.started_at[:19].replace('T', ' ')} UTC",
            highlight=False,
        )
    console.print(
        f"imported {len(records)} run(s) into {escape(str(store_path))}; {skipped} already there", highlight=False
    )
