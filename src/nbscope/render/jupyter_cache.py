"""What ``nbscope import-jupyter-cache`` prints: each run it stored (notebook, wall time, when it was executed)
and how many were there already, or the runs themselves as JSON."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.markup import escape

from nbscope.render.terminal import console, format_seconds

if TYPE_CHECKING:
    from nbscope.api.jupyter_cache import CacheImport


def cache_import_json(imported: CacheImport) -> str:
    """The runs as run documents (each with its id in the store) and the count already stored."""
    return json.dumps({"imported": [r.to_dict() | {"run_id": r.run_id} for r in imported.records],
                       "skipped": imported.skipped}, indent=1, default=str)


def print_cache_import(imported: CacheImport) -> None:
    for record in imported.records:
        console.print(
            f"run {record.run_id}: {escape(record.target)} · {format_seconds(record.notebook_run().totals.wall_s)}"
            f" · executed {record.started_at[:19].replace('T', ' ')} UTC",
            highlight=False,
        )
    console.print(f"imported {len(imported.records)} run(s) into {escape(str(imported.store_path))}; "
                  f"{imported.skipped} already there", highlight=False)
