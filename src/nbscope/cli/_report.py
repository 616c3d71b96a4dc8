"""``nbscope report``: one self-contained HTML page of stored runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nbscope.api.files import check_target, is_stdout
from nbscope.cli import app
from nbscope.cli._options import DbOption, open_store, output_option, run_help


@app.command()
def report(
    runs: Annotated[
        list[str], typer.Argument(metavar="RUN...", help=run_help("Runs, each") + " The first is the baseline.")
    ],
    output: Annotated[Path, output_option("HTML file to write.")] = Path("report.html"),
    db: DbOption = None,
    title: Annotated[str | None, typer.Option(help="Page title.")] = None,
    no_history: Annotated[bool, typer.Option("--no-history", help="Leave out the history chart.")] = False,
    metric: Annotated[str, typer.Option(help="Figure of the history chart.")] = "wall_s",
) -> None:
    """One self-contained HTML report (no network): fingerprints, waterfalls, compared runs, pathways,
    loop sweeps, diagnoses and history, plots as inline SVG."""
    from nbscope.api.report import report as report_data
    from nbscope.render.html import write_report

    store = open_store(db, read_only=True)
    check_target(output)  # after the store is open: -o naming it is refused before the report is built
    data = report_data(runs, store, history=not no_history, metric=metric)
    path = write_report(data, output, title=title)
    if not is_stdout(path):
        print(f"report written to {path} ({path.stat().st_size // 1024} KiB)")
