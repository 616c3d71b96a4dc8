"""Foundation commands: info, runs, show, export, import."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from nbscope._errors import NbscopeError
from nbscope.cli import app
from nbscope.cli._options import DbOption, JsonOption, open_store


@app.command()
def info(
    as_json: JsonOption = False,
    jax: Annotated[bool, typer.Option("--jax", help="Also initialise JAX: backend, devices, x64 (slow).")] = False,
    diff: Annotated[
        tuple[Path, Path] | None,
        typer.Option("--diff", metavar="A.json B.json", help="List the fields that differ between two fingerprints."),
    ] = None,
    all_fields: Annotated[bool, typer.Option("--all", help="With --diff: include volatile fields (load, clocks).")] = False,
) -> None:
    """The machine fingerprint: CPU, memory, BLAS, GPUs, library versions, settings that change timings."""
    from nbscope import api
    from nbscope.render import terminal

    if diff is not None:
        rows = api.diff_fingerprints(diff[0], diff[1], include_volatile=all_fields)
        if as_json:
            print(json.dumps([{"field": f, "a": a, "b": b} for f, a, b in rows], indent=1, default=str))
        else:
            terminal.print_fingerprint_diff(rows, str(diff[0]), str(diff[1]))
        return
    fingerprint = api.collect_fingerprint(include_jax=jax)
    if as_json:
        print(json.dumps(fingerprint, indent=1, default=str))
    else:
        terminal.print_fingerprint(fingerprint)


@app.command()
def runs(
    db: DbOption = None,
    kind: Annotated[str | None, typer.Option(help="Only runs of this kind (profile, bench, ...).")] = None,
    target: Annotated[str | None, typer.Option(help="Only runs of this notebook or benchmark.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """List stored runs: id, time, kind, target, machine, digest, headline totals."""
    from nbscope.render import terminal

    rows = open_store(db).list(kind=kind, target=target, limit=limit)
    if as_json:
        print(json.dumps(rows, indent=1))
    else:
        terminal.print_run_list(rows)


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="Run id in the store, or an exported run JSON file.")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print one run."""
    from nbscope.render import terminal
    from nbscope.store import resolve_run

    record = resolve_run(run_id, open_store(db))
    if as_json:
        print(record.to_json())
    else:
        terminal.print_record(record)


@app.command()
def export(
    run_id: Annotated[int, typer.Argument(help="Run id in the store.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="JSON file to write.")],
    db: DbOption = None,
) -> None:
    """Write one run as a JSON record (to move it to another machine)."""
    from nbscope import record as record_module

    record = open_store(db).get(run_id)
    if output.is_dir():
        raise NbscopeError(f"-o {output} is a directory; give a file name")
    record_module.dump(record, output)
    print(f"run {run_id} written to {output}")


@app.command("import")
def import_(
    files: Annotated[list[Path], typer.Argument(help="Run JSON files written by `nbscope export` or --json.")],
    db: DbOption = None,
) -> None:
    """Add exported runs (from another machine, a CI artifact) to the store."""
    from nbscope import record as record_module

    records = [record_module.load(path) for path in files]  # validate all before writing any
    store = open_store(db)
    for path, record in zip(files, records, strict=True):
        run_id, added = store.add(record)
        if added:
            print(f"{path}: imported as run {run_id}")
        else:
            print(f"{path}: already in {store.path} as run {run_id}; not imported again")
