"""``nbscope profile`` and ``nbscope trace``."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer

from nbscope._errors import NbscopeError
from nbscope.cli import app, output_may_close
from nbscope.cli._options import (
    DbOption,
    DevicesOption,
    JsonOption,
    LabelOption,
    MarkdownOption,
    TimeoutOption,
    all_option,
    limit_option,
    open_store,
)

NoDiagnoseOption = Annotated[
    bool, typer.Option("--no-diagnose", help="Do not end with the run's top findings (nor add them to --json).")
]
AllowErrorsOption = Annotated[
    bool,
    typer.Option("--allow-errors", help="Exit 0 although a cell raised, timed out or killed its kernel (as nbclient's "
                 "and jupyter-book's allow_errors); without it such a run exits 1. The run is stored either way."),
]
TOP_FINDINGS = 3


def _diagnose_command(record: Any, store: Any, devices: Path | None = None) -> str:
    """The command that shows a stored run's findings in full (with the device file they were forecast from)."""
    from nbscope.record.store import default_path

    command = f"nbscope diagnose {record.run_id}" + (f" --devices {devices}" if devices is not None else "")
    try:
        same = Path(store.path).resolve() == default_path().resolve()
    except OSError:
        same = False
    return command if same else f"{command} --db {store.path}"


def _with_diagnosis(record: Any, findings: Any, why_not: str | None) -> dict[str, Any]:
    """A run record's document with its findings under "diagnosis" (not part of the stored record)."""
    document = json.loads(record.to_json())
    document["diagnosis"] = findings.to_dict() if findings is not None else {"error": why_not}
    return document


def _print_findings_end(
    record: Any, findings: Any, why_not: str | None, store: Any, devices: Path | None = None
) -> None:
    """What ends the main job's output: the top findings, each with its fix, and the command that shows them all."""
    from nbscope.render import compare as view
    from nbscope.render.terminal import console, literal

    if findings is None:
        console.print(f"[dim]no findings: the run could not be diagnosed ({literal(why_not)})[/dim]")
        return
    view.print_top_findings(findings, record, _diagnose_command(record, store, devices), top=TOP_FINDINGS)


def _progress(total: int, enabled: bool) -> tuple[Any, Any, Any]:
    """Live progress on a terminal: the current cell and the elapsed time."""
    if not enabled:
        return nullcontext(), None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from nbscope.render.terminal import console, literal

    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True,
    )
    task = progress.add_task("starting kernel", total=total)

    def started(cell: Any) -> None:
        where = f" line {cell.line}" if cell.line else ""
        progress.update(task, description=f"cell {cell.index + 1}{where}: {literal(cell.first_line[:40])}")

    def done(_: Any) -> None:
        progress.advance(task)

    return progress, started, done


@app.command()
def profile(
    path: Annotated[Path, typer.Argument(help="Notebook: .ipynb or MyST .md")],
    db: DbOption = None,
    timeout: TimeoutOption = None,
    on_error: Annotated[str, typer.Option("--on-error", help="continue | stop")] = "continue",
    kernel: Annotated[str | None, typer.Option(help="Kernel name (default: the notebook's).")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE for the kernel; repeatable. Values are stored as hashes (timing settings such as JAX_*, XLA_* stay readable).")] = None,
    env_store_values: Annotated[bool, typer.Option("--env-store-values", help="Store --env values themselves, not their hashes.")] = False,
    jax_platform: Annotated[str | None, typer.Option("--jax-platform", help="JAX_PLATFORMS for the kernel: cpu, cuda, ...")] = None,
    jax_cache: Annotated[str, typer.Option("--jax-cache", help="Persistent compile cache: off | cold | warm | DIR (cold removes only what JAX wrote in the store's own cache folder)")] = "off",
    repeat: Annotated[int, typer.Option(help="Run N times, each in a fresh kernel; report medians.")] = 1,
    limit: Annotated[int, limit_option("Show the N slowest cells.")] = 15,
    all_cells: Annotated[bool, all_option("Show every cell, in notebook order.")] = False,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
    backends: Annotated[
        str | None, typer.Option("--backends", help="Comma-separated JAX platforms: profile once per backend and compare.")
    ] = None,
    timeline: Annotated[
        bool, typer.Option("--timeline", help="Trace each cell with jax.profiler: device busy, ops, dispatch, copies, class.")
    ] = False,
    keep_traces: Annotated[
        Path | None, typer.Option("--keep-traces", metavar="DIR", help="Keep the raw traces here (implies --timeline).")
    ] = None,
    forecast: Annotated[
        str | None,
        typer.Option("--forecast", metavar="GPU[,GPU...]", help="Record program data and forecast each cell on these GPUs (see `nbscope forecast --help`)."),
    ] = None,
    programs: Annotated[
        bool, typer.Option("--programs", help="Record program data (executions, loops, work) for a later `nbscope forecast`.")
    ] = False,
    devices: DevicesOption = None,
    no_diagnose: NoDiagnoseOption = False,
    label: LabelOption = None,
    allow_errors: AllowErrorsOption = False,
) -> None:
    """Per-cell ledger of a notebook run in a real Jupyter kernel: wall, compile, run, compiles, memory; then its top
    findings (causes with their fixes; `nbscope diagnose RUN` shows them in full). Exits 1 when a cell failed
    (an error, a timeout, a dead kernel) unless --allow-errors."""
    from nbscope.api.profile import ProfileOptions, RunNotStored, parse_env, preflight
    from nbscope.api.profile import profile as run_profile
    from nbscope.render.terminal import console

    options = ProfileOptions(
        timeout=timeout, on_error=on_error, kernel=kernel, env=parse_env(env or []), env_store_values=env_store_values,
        jax_platform=jax_platform, jax_cache=jax_cache, repeat=repeat,
        timeline=timeline or keep_traces is not None, keep_traces=keep_traces.resolve() if keep_traces else None,
    )
    options.validate()
    gpus = _forecast_gpus(forecast, devices)  # an unknown GPU is refused before anything runs
    options.programs, options.forecast = programs or bool(gpus), [d.key for d in gpus]
    store = open_store(db)
    if backends:
        records = _profile_backends(path, options, backends, store=store, as_json=as_json, markdown=markdown,
                                    diagnosis=not no_diagnose)
        _exit_if_failed(records, allow_errors)
        return
    # Options, notebook, kernel, backend and store, checked before a kernel starts (a one-line error).
    notebook = preflight(path, options, store)
    for warning in notebook.warnings:  # a MyST file whose structure looks broken still runs, with a warning
        typer.echo(f"nbscope: warning: {warning}", err=True)
    interactive = console.is_terminal and not (as_json or markdown)
    progress, started, done = _progress(len(notebook.code_cells) * repeat, interactive)
    not_stored = None
    try:
        with progress:
            record = run_profile(path, options, store=store, on_cell_start=started, on_cell_done=done)
    except RunNotStored as exc:  # measured, not stored: the ledger first, then how to store it (exit 2)
        record, not_stored = exc.record, exc
    with output_may_close():  # the reader of the output may have had enough; the exit status still tells
        _print_profile(record, path, options, store, gpus=gpus, devices=devices, as_json=as_json, markdown=markdown,
                       limit=limit, all_cells=all_cells, no_diagnose=no_diagnose or not_stored is not None)
    if not_stored is not None:
        raise not_stored
    _exit_if_failed([record], allow_errors)


def _exit_if_failed(records: list[Any], allow_errors: bool) -> None:
    """Exit 1, with one line on stderr, when a cell of these runs failed: what CI needs to fail a broken lecture."""
    from nbscope.api.profile import failed_cells
    from nbscope.record.cells import label

    failed = [(record, cell) for record in records for cell in failed_cells(record)]
    if not failed or allow_errors:
        return
    record, cell = failed[0]
    error = cell.get("error") or {}
    what = f"{cell.get('status')}" + (f" {error.get('name')}" if error.get("name") else "")
    more = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
    where = f"run {record.run_id}" if record.run_id is not None else "the run"
    typer.echo(f"nbscope: failed: {label(cell)} of {record.target} ({what}){more}; {where} is stored "
               "with what it measured (--allow-errors exits 0 even so)", err=True)
    raise typer.Exit(1)


def _print_profile(record: Any, path: Path, options: Any, store: Any, *, gpus: list[Any], devices: Path | None,
                   as_json: bool, markdown: bool, limit: int, all_cells: bool, no_diagnose: bool) -> None:
    """The profile's output: its ledger (JSON, markdown or a table), forecast, timeline and top findings."""
    from nbscope.api.profile import diagnosis_of
    from nbscope.render import ledger
    from nbscope.render.terminal import console, literal

    findings, why_not = (None, "--no-diagnose") if no_diagnose else diagnosis_of(record, path, devices_file=devices)
    if as_json:
        print(json.dumps(_with_diagnosis(record, findings, why_not), indent=1, default=str) if not no_diagnose
              else record.to_json())
    elif markdown:
        print(ledger.profile_markdown(record, top=None if all_cells else limit, notebook_order=all_cells))
        if gpus:
            from nbscope.analyse.forecast import forecast as run_forecast
            from nbscope.render.forecast import forecast_markdown

            print(forecast_markdown(run_forecast(record, options.forecast, devices_file=devices, notebook_path=path)))
        if findings is not None:
            from nbscope.render.compare import findings_markdown

            print(findings_markdown(findings, record, top=TOP_FINDINGS, command=_diagnose_command(record, store, devices)), end="")
    else:
        ledger.print_profile(record, top=None if all_cells else limit, notebook_order=all_cells)
        if options.timeline:
            from nbscope.render.timeline import print_timeline

            print_timeline(record)
        if gpus:
            from nbscope.analyse.forecast import forecast as run_forecast
            from nbscope.render.forecast import print_forecast

            print_forecast(run_forecast(record, options.forecast, devices_file=devices, notebook_path=path))
        if record.run_id is not None:
            console.print(f"[dim]saved as run {record.run_id} in {literal(store.path)}[/dim]")
        if not no_diagnose:
            _print_findings_end(record, findings, why_not, store, devices)


def _profile_backends(path: Path, options: Any, backends: str, *, store: Any, as_json: bool, markdown: bool,
                      diagnosis: bool) -> list[Any]:
    """Profile once per backend and print their comparison; the runs made."""
    from nbscope.api.backends import parse_backends, profile_backends
    from nbscope.render import compare as view
    from nbscope.render.terminal import console

    names = parse_backends(backends, at_least=2)
    quiet = as_json or markdown
    result = profile_backends(
        path, options, names, store=store,
        on_backend=None if quiet else lambda b: console.print(f"[dim]profiling with JAX_PLATFORMS={b} …[/dim]"),
    )
    if as_json:
        document = result.to_dict()
        if not diagnosis:
            document.pop("diagnosis", None)
        print(json.dumps(document, indent=1, default=str))
    elif markdown:
        print(view.backends_markdown(result), end="")
    else:
        commands = {r["backend"]: _diagnose_command(result.record_of(r["backend"]), store) for r in result.runs if r["run_id"]}
        view.print_backends(result, store_path=store.path, commands=commands, diagnosis=diagnosis)
    # A backend JAX could not start is reported above, not counted as the notebook failing.
    return [r["record"] for r in result.runs if r["record"] is not None and r["available"]]


def _forecast_gpus(names: str | None, devices: Path | None) -> list[Any]:
    """The GPUs of ``--forecast`` from the device table (one-line error for an unknown one)."""
    if not names:
        return []
    from nbscope.analyse.forecast.devices import load_table, resolve

    return resolve(load_table(devices), names)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def trace(
    ctx: typer.Context,
    db: DbOption = None,
    as_json: JsonOption = False,
    source: Annotated[
        list[Path] | None,
        typer.Option("--source", help="Notebook sources to match kernels against (default: found under the working dir)."),
    ] = None,
    command_timeout: Annotated[
        float | None,
        typer.Option("--command-timeout", metavar="SECONDS", help="Stop the whole command (and its kernels) after this many seconds."),
    ] = None,
    fresh: Annotated[
        bool,
        typer.Option("--fresh", help="jupyter-book 2: set its execution cache (_build/execute) aside so every page "
                     "runs; it is put back afterwards."),
    ] = False,
    jupyter_book2: Annotated[
        bool,
        typer.Option("--jupyter-book2", help="Put the jupyter-book 2 of `nbscope book2-env` first on PATH, so that "
                     "`jupyter book` runs it where jupyter-book 1 is installed too."),
    ] = False,
    no_diagnose: NoDiagnoseOption = False,
    per_cell_timeout: Annotated[float | None, typer.Option("--timeout", hidden=True)] = None,
    label: LabelOption = None,
    allow_errors: AllowErrorsOption = False,
    forecast: Annotated[
        str | None,
        typer.Option("--forecast", metavar="GPU[,GPU...]", help="Record program data in every kernel, for `nbscope forecast RUN` on these GPUs (no notebook runs twice)."),
    ] = None,
) -> None:
    """Run a command that starts Jupyter kernels (jupyter-book build, jupyter book build --execute, nbconvert
    --execute, papermill) with the probe injected, and store one profile per executed notebook:
    nbscope trace -- COMMAND ... Exits with the command's status when it failed, else 1 when a traced cell
    failed (unless --allow-errors)."""
    from nbscope.api.profile import diagnosis_of
    from nbscope.api.trace import cached_pages_note, theme_note, trace_command

    if per_cell_timeout is not None:
        raise NbscopeError("trace has no per-cell --timeout (cells run in the traced command); "
                           "--command-timeout SECONDS stops the whole command")
    command = list(ctx.args)
    gpus = [d.key for d in _forecast_gpus(forecast, None)] if forecast else None  # unknown GPU: refused first
    store = open_store(db)
    result = trace_command(
        command, store=store, sources=source, timeout=command_timeout, fresh=fresh, jupyter_book2_first=jupyter_book2,
        forecast=gpus,
    )
    for note in (cached_pages_note(result), theme_note(result)):
        if note:
            typer.echo(f"nbscope: note: {note}", err=True)
    records = result.records
    diagnoses = [(None, "--no-diagnose") if no_diagnose else diagnosis_of(r) for r in records]
    with output_may_close():  # the reader of the output may have had enough; the exit status still tells
        if as_json:
            # Each a run document (`nbscope show/gate --candidate FILE` read it) plus its id in the store.
            documents = [(r.to_dict() if no_diagnose else _with_diagnosis(r, *d)) | {"run_id": r.run_id}
                         for r, d in zip(records, diagnoses, strict=True)]
            print(json.dumps(documents, indent=1, default=str))
        else:
            _print_traced(records, result.returncode, None if no_diagnose else diagnoses, store)
    not_stored = result.not_stored_message(store.path)
    if not_stored is not None:  # the ledgers first, then where the runs are kept and how to store them (exit 2)
        raise NbscopeError(not_stored)
    if result.returncode:
        # What was measured is stored; the failure still shows. A command a signal ended exits
        # 128 + the signal, as a shell reports it.
        raise typer.Exit(result.returncode if result.returncode > 0 else 128 - result.returncode)
    _exit_if_failed(records, allow_errors)


def _print_traced(records: list[Any], returncode: int, diagnoses: list[tuple[Any, str | None]] | None, store: Any) -> None:
    from nbscope.render import ledger
    from nbscope.render.terminal import console

    for number, record in enumerate(records):
        ledger.print_profile(record, top=10)
        if record.run_id is not None:
            console.print(f"[dim]saved as run {record.run_id}[/dim]")
        if diagnoses is not None and record.run_id is not None:
            _print_findings_end(record, *diagnoses[number], store)
        console.print()
    if returncode > 0:
        console.print(f"[red]the traced command exited {returncode}[/red]")
    elif returncode < 0:
        console.print(f"[red]the traced command was ended by signal {-returncode}[/red]")
