"""The `nbscope trace` command: a command that starts Jupyter kernels (jupyter-book, nbconvert, papermill) run
with the probe injected, one stored profile per executed notebook."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from nbscope.api import NbscopeError
from nbscope.cli import app, output_may_close
from nbscope.cli._after_run import exit_if_failed, print_findings_end, with_diagnosis
from nbscope.cli._options import AllowErrorsOption, DbOption, JsonOption, LabelOption, NoDiagnoseOption, warn

if TYPE_CHECKING:
    from nbscope.api.trace import TraceOutcome


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def trace(
    ctx: typer.Context,
    db: DbOption = None,
    as_json: JsonOption = False,
    source: Annotated[
        list[Path] | None,
        typer.Option(
            "--source", help="Notebook sources to match kernels against (default: found under the working dir)."
        ),
    ] = None,
    command_timeout: Annotated[
        float | None,
        typer.Option(
            "--command-timeout",
            metavar="SECONDS",
            help="Stop the whole command (and its kernels) after this many seconds.",
        ),
    ] = None,
    cell_timeout: Annotated[
        float | None,
        typer.Option(
            "--cell-timeout",
            metavar="SECONDS",
            help="Stop a cell of any traced kernel that runs longer "
            "(interrupt, then end its kernel if it does not stop); it is recorded as timeout and the "
            "build goes on as the builder does after a failing cell.",
        ),
    ] = None,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh",
            help="jupyter-book 2: set its execution cache (_build/execute) aside so every page "
            "runs; it is put back afterwards.",
        ),
    ] = False,
    theme_stand_in: Annotated[
        bool,
        typer.Option(
            "--theme-stand-in",
            help="mystmd / jupyter-book 2 offline: a local stand-in for the site theme "
            "it would download, written into the book's _build only where no theme is, removed after.",
        ),
    ] = False,
    jupyter_book2: Annotated[
        bool,
        typer.Option(
            "--jupyter-book2",
            help="Put the jupyter-book 2 of `nbscope book2-env` first on PATH, so that "
            "`jupyter book` runs it where jupyter-book 1 is installed too.",
        ),
    ] = False,
    no_diagnose: NoDiagnoseOption = False,
    per_cell_timeout: Annotated[float | None, typer.Option("--timeout", hidden=True)] = None,
    label: LabelOption = None,
    allow_errors: AllowErrorsOption = False,
    forecast: Annotated[
        str | None,
        typer.Option(
            "--forecast",
            metavar="GPU[,GPU...]",
            help="Record program data in every kernel, for `nbscope forecast RUN` on these GPUs (no notebook runs twice).",
        ),
    ] = None,
) -> None:
    """Run a command that starts Jupyter kernels (jupyter-book build, jupyter book build --execute, nbconvert
    --execute, papermill) with the probe injected, and store one profile per executed notebook:
    nbscope trace -- COMMAND ... Exits with the command's status when it failed, else 1 when a traced cell
    failed (unless --allow-errors)."""
    from nbscope.api.trace import trace as run_trace

    if per_cell_timeout is not None:
        raise NbscopeError(
            "trace has no --timeout: --cell-timeout SECONDS stops a cell that runs longer, "
            "--command-timeout SECONDS stops the whole command"
        )
    outcome = run_trace(
        list(ctx.args),
        db,
        on_skip=warn,
        label=label,
        forecast=forecast,
        diagnose=not no_diagnose,
        sources=source,
        timeout=command_timeout,
        fresh=fresh,
        jupyter_book2_first=jupyter_book2,
        cell_timeout=cell_timeout,
        theme_stand_in=theme_stand_in,
    )
    for note in outcome.notes:
        typer.echo(f"nbscope: note: {note}", err=True)
    with output_may_close():  # the reader of the output may have had enough; the exit status still tells
        if as_json:
            print(_traced_json(outcome))
        else:
            _print_traced(outcome)
    if outcome.not_stored is not None:  # the ledgers first, then where the runs are kept and how to store them (exit 2)
        raise NbscopeError(outcome.not_stored)
    if outcome.command_exit_code:
        # What was measured is stored; the failure still shows. A command a signal ended exits
        # 128 + the signal, as a shell reports it.
        raise typer.Exit(outcome.command_exit_code)
    exit_if_failed(outcome.failed, allow_errors)


def _traced_json(outcome: TraceOutcome) -> str:
    """Each run a run document (`nbscope show/gate --candidate FILE` read it) plus its id in the store."""
    documents = [
        (r.to_dict() if not outcome.diagnosed else with_diagnosis(r, *d)) | {"run_id": r.run_id}
        for r, d in zip(outcome.records, outcome.diagnoses, strict=True)
    ]
    return json.dumps(documents, indent=1, default=str)


def _print_traced(outcome: TraceOutcome) -> None:
    from nbscope.render import ledger
    from nbscope.render.terminal import console

    for record, diagnosis in zip(outcome.records, outcome.diagnoses, strict=True):
        ledger.print_profile(record, top=10)
        if record.run_id is not None:
            console.print(f"[dim]saved as run {record.run_id}[/dim]")
        if outcome.diagnosed and record.run_id is not None:
            print_findings_end(record, *diagnosis, outcome.store)
        console.print()
    returncode = outcome.result.returncode
    if returncode > 0:
        console.print(f"[red]the traced command exited {returncode}[/red]")
    elif returncode < 0:
        console.print(f"[red]the traced command was ended by signal {-returncode}[/red]")
