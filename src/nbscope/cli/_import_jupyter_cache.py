"""The `nbscope import-jupyter-cache` command: jupyter-book's cached execution times as runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from nbscope.cli import app
from nbscope.cli._options import DbOption, JsonOption, open_store


@app.command("import-jupyter-cache")
def import_jupyter_cache(
    path: Annotated[Path, typer.Argument(help="jupyter-book 1's jupyter-cache (_build/.jupyter_cache or its global.db), "
                                              "jupyter-book 2's _build/execute, or the book's folder.")],
    db: DbOption = None,
    fingerprint: Annotated[
        Path | None,
        typer.Option(help="Fingerprint of the machine that built the book (`nbscope info --json` output); default: this machine."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Turn jupyter-book's cached execution times (jupyter-book 1 or 2) into runs (kind jupyter-cache), one per
    notebook execution."""
    from nbscope.api.info import load_fingerprint
    from nbscope.api.jupyter_cache import import_jupyter_cache

    given = load_fingerprint(fingerprint) if fingerprint is not None else None
    store = open_store(db)
    imported = import_jupyter_cache(path, store, fingerprint=given,
                                    fingerprint_source=str(fingerprint) if fingerprint else None)
    records, skipped = imported.records, imported.skipped
    if as_json:
        print(json.dumps({"imported": [r.to_dict() | {"run_id": r.run_id} for r in records], "skipped": skipped},
                         indent=1, default=str))
        return
    from rich.markup import escape

    from nbscope.render.terminal import console, format_seconds

    for record in records:
        console.print(
            f"run {record.run_id}: {escape(record.target)} · {format_seconds(record.measurements['totals']['wall_s'])}"
            f" · executed {record.started_at[:19].replace('T', ' ')} UTC",
            highlight=False,
        )
    console.print(f"imported {len(records)} run(s) into {escape(str(store.path))}; {skipped} already there", highlight=False)
