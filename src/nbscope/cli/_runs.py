"""The run store's commands: `nbscope runs`, `show`, `export` and `import` (runs listed, shown, moved between machines)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nbscope.cli import app
from nbscope.cli._options import (
    DbOption,
    JsonOption,
    RunArgument,
    all_option,
    confirm_written,
    limit_option,
    output_option,
    warn,
)


@app.command()
def runs(
    db: DbOption = None,
    kind: Annotated[str | None, typer.Option(help="Only runs of this kind (profile, bench, ...).")] = None,
    target: Annotated[
        str | None, typer.Option(help="Only runs of this notebook (a path, or its name as listed) or benchmark.")
    ] = None,
    label: Annotated[str | None, typer.Option("--label", help="Only runs recorded with this --label.")] = None,
    limit: Annotated[int, limit_option("At most N runs, newest first.")] = 50,
    everything: Annotated[bool, all_option("Every run (no --limit).")] = False,
    as_json: JsonOption = False,
    unfinished: Annotated[
        bool,
        typer.Option(
            "--unfinished",
            help="List this store's runs killed before they were stored (import them with `nbscope import FILE`).",
        ),
    ] = False,
    running_now: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Each kernel that a profile, audit or traced build runs now: its notebook, "
            "the cell it runs (number, line, first line) and for how long (any store).",
        ),
    ] = False,
) -> None:
    """List stored runs: id, time, kind, notebook, backend, status, label, digest and the headline figures."""
    from nbscope.api.run_list import list_runs
    from nbscope.render.runs import print_runs, runs_json

    listing = list_runs(
        db,
        kind=kind,
        target=target,
        label=label,
        limit=None if everything else limit,
        unfinished_only=unfinished,
        live=running_now,
        on_skip=warn,
    )
    if as_json:
        print(runs_json(listing))
    else:
        print_runs(listing)


@app.command()
def show(run: RunArgument, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Print one run: a profile's every cell in notebook order, with its figures."""
    from nbscope.api.runs import show as show_run
    from nbscope.render import terminal
    from nbscope.render.trial import trials_summary

    shown = show_run(run, db, on_skip=warn)
    if as_json:
        print(shown.record.to_json())
    else:
        terminal.print_record(shown.record)
        for line in trials_summary(shown.trials):
            print(line)


@app.command()
def export(
    run: RunArgument,
    output: Annotated[Path, output_option("JSON file to write.")],
    db: DbOption = None,
    portable: Annotated[
        bool,
        typer.Option(
            "--portable",
            help="Drop machine-local paths (home folder, project root, interpreter, kernel "
            "folder) for sharing; docs/run-record.md lists the fields.",
        ),
    ] = False,
) -> None:
    """Write one run as a JSON record (to move it to another machine).

    By default the record is written as stored, so that importing it back finds the same run; --portable
    drops what only this machine knows (paths) for a record that is shared."""
    from nbscope.api.runs import export as export_run

    exported = export_run(run, output, db, portable=portable, on_skip=warn)
    confirm_written(f"{exported.name} written to {exported.written_to}", output)


@app.command("import")
def import_(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Run JSON files written by `nbscope export` or --json, or live files of unfinished runs (.jsonl)."
        ),
    ],
    db: DbOption = None,
) -> None:
    """Add exported runs (from another machine, a CI artifact) to the store.

    Each run is stored once. A live file (.jsonl) of an unfinished run is removed once stored only when it is
    one of this store's own live files (`nbscope runs --unfinished` lists them); any other file stays."""
    from nbscope.api.live import import_runs
    from nbscope.render.runs import import_lines

    import_runs(files, db, on_skip=warn, on_run=lambda run, store: print(*import_lines([run], store), flush=True))
