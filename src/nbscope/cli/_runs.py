"""The run store's commands: `nbscope runs`, `show`, `export` and `import` (runs listed, shown, moved between machines)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from nbscope.api.files import written_to
from nbscope.cli import app
from nbscope.cli._options import (
    DbOption,
    JsonOption,
    RunArgument,
    all_option,
    confirm_written,
    limit_option,
    open_store,
    output_file,
    output_option,
    resolve,
    warn,
)

if TYPE_CHECKING:
    from nbscope.api.runs import RunRecord, Store


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
        bool, typer.Option("--unfinished", help="List this store's runs killed before they were stored (import them with `nbscope import FILE`).")
    ] = False,
    running_now: Annotated[
        bool, typer.Option("--live", help="Each kernel that a profile, audit or traced build runs now: its notebook, "
                           "the cell it runs (number, line, first line) and for how long (any store).")
    ] = False,
) -> None:
    """List stored runs: id, time, kind, notebook, backend, status, label, digest and the headline figures."""
    from nbscope.api.run_list import list_runs
    from nbscope.render.runs import print_runs, runs_json

    listing = list_runs(db, kind=kind, target=target, label=label, limit=None if everything else limit,
                        unfinished_only=unfinished, live=running_now, on_skip=warn)
    if as_json:
        print(runs_json(listing))
    else:
        print_runs(listing)


def _store_live(path: Path, record: RunRecord, store: Store) -> None:
    """``nbscope import LIVEFILE.jsonl``: store an unfinished run (once), ``ok`` when every cell was measured, else
    ``partial``; the file is removed
    when it is one of this store's live files, and kept otherwise."""
    from nbscope.api import live

    done = live.store_recovered(path, record, store)
    totals = record.notebook_run().totals
    what = (f"imported as run {record.run_id} ({record.status}: {totals.cells_run} of {totals.cells} cells ran)"
            if done.added else f"already in {store.path} as run {record.run_id}; not imported again")
    kept = ("the live file is removed" if done.removed
            else "the file is kept (it is not one of this store's live files)")
    print(f"{path}: {what}; {kept}")


@app.command()
def show(
    run: RunArgument,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print one run: a profile's every cell in notebook order, with its figures."""
    from nbscope.render import terminal

    record = resolve(run, open_store(db, read_only=True))
    if as_json:
        print(record.to_json())
    else:
        terminal.print_record(record)


@app.command()
def export(
    run: RunArgument,
    output: Annotated[Path, output_option("JSON file to write.")],
    db: DbOption = None,
    portable: Annotated[
        bool,
        typer.Option("--portable", help="Drop machine-local paths (home folder, project root, interpreter, kernel "
                     "folder) for sharing; docs/run-record.md lists the fields."),
    ] = False,
) -> None:
    """Write one run as a JSON record (to move it to another machine).

    By default the record is written as stored, so that importing it back finds the same run; --portable
    drops what only this machine knows (paths) for a record that is shared."""
    from nbscope.api.runs import export_run

    store = open_store(db, read_only=True)
    output_file(output)  # after the store is open: -o naming it is refused before anything is written
    record = export_run(resolve(run, store), output, portable=portable)
    name = f"run {record.run_id}" if record.run_id is not None else run
    confirm_written(f"{name} written to {written_to(output)}", output)


@app.command("import")
def import_(
    files: Annotated[
        list[Path],
        typer.Argument(help="Run JSON files written by `nbscope export` or --json, or live files of unfinished runs (.jsonl)."),
    ],
    db: DbOption = None,
) -> None:
    """Add exported runs (from another machine, a CI artifact) to the store.

    Each run is stored once. A live file (.jsonl) of an unfinished run is removed once stored only when it is
    one of this store's own live files (`nbscope runs --unfinished` lists them); any other file stays."""
    from nbscope.api import live
    from nbscope.api.runs import load_run

    # Live files are unfinished runs (nbscope runs --unfinished); the others are run records.
    recovered = [(path, live.recover_unfinished(path)) for path in files if path.suffix == ".jsonl"]
    files = [path for path in files if path.suffix != ".jsonl"]
    records = [load_run(path) for path in files]  # validate all before writing any
    store = open_store(db)
    for path, partial in recovered:
        _store_live(path, partial, store)
    for path, record in zip(files, records, strict=True):
        run_id, added = store.add(record)
        if added:
            print(f"{path}: imported as run {run_id}")
        else:
            print(f"{path}: already in {store.path} as run {run_id}; not imported again")
