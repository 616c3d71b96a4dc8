"""The `nbscope import-jupyter-cache` command: jupyter-book's cached execution times as runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nbscope.cli import app
from nbscope.cli._options import DbOption, JsonOption, warn


@app.command("import-jupyter-cache")
def import_jupyter_cache(
    path: Annotated[
        Path,
        typer.Argument(
            help="jupyter-book 1's jupyter-cache (_build/.jupyter_cache or its global.db), "
            "jupyter-book 2's _build/execute, or the book's folder."
        ),
    ],
    db: DbOption = None,
    fingerprint: Annotated[
        Path | None,
        typer.Option(
            help="Fingerprint of the machine that built the book (`nbscope info --json` output); default: this machine."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Turn jupyter-book's cached execution times (jupyter-book 1 or 2) into runs (kind jupyter-cache), one per
    notebook execution."""
    from nbscope.api.jupyter_cache import import_jupyter_cache_command
    from nbscope.render.jupyter_cache import cache_import_json, print_cache_import

    imported = import_jupyter_cache_command(path, db, fingerprint_file=fingerprint, on_skip=warn)
    if as_json:
        print(cache_import_json(imported.records, imported.skipped))
    else:
        print_cache_import(imported.records, imported.skipped, imported.store_path)
