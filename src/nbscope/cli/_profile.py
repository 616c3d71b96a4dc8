"""``nbscope profile`` and ``nbscope trace``."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer

from nbscope.cli import app, output_may_close
from nbscope.cli._after_run import (
    TOP_FINDINGS,
    diagnose_command,
    exit_if_failed,
    forecast_gpus,
    print_findings_end,
    with_diagnosis,
)
from nbscope.cli._options import (
    AllowErrorsOption,
    DbOption,
    DevicesOption,
    JsonOption,
    LabelOption,
    MarkdownOption,
    NoDiagnoseOption,
    TimeoutOption,
    all_option,
    limit_option,
    open_store,
)


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
    gpus = forecast_gpus(forecast, devices)  # an unknown GPU is refused before anything runs
    options.programs, options.forecast = programs or bool(gpus), [d.key for d in gpus]
    store = open_store(db)
    if backends:
        records = _profile_backends(path, options, backends, store=store, as_json=as_json, markdown=markdown,
                                    diagnosis=not no_diagnose)
        exit_if_failed(records, allow_errors)
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
    for warning in probe_warnings(record):  # e.g. a notebook that removed nbscope's cell callbacks
        typer.echo(f"nbscope: warning: {warning}", err=True)
    with output_may_close():  # the reader of the output may have had enough; the exit status still tells
        _print_profile(record, path, options, store, gpus=gpus, devices=devices, as_json=as_json, markdown=markdown,
                       limit=limit, all_cells=all_cells, no_diagnose=no_diagnose or not_stored is not None)
    if not_stored is not None:
        raise not_stored
    exit_if_failed([record], allow_errors)




def _print_profile(record: Any, path: Path, options: Any, store: Any, *, gpus: list[Any], devices: Path | None,
                   as_json: bool, markdown: bool, limit: int, all_cells: bool, no_diagnose: bool) -> None:
    """The profile's output: its ledger (JSON, markdown or a table), forecast, timeline and top findings."""
    from nbscope.api.profile import diagnosis_of
    from nbscope.render import ledger
    from nbscope.render.terminal import console, literal

    findings, why_not = (None, "--no-diagnose") if no_diagnose else diagnosis_of(record, path, devices_file=devices)
    if as_json:
        print(json.dumps(with_diagnosis(record, findings, why_not), indent=1, default=str) if not no_diagnose
              else record.to_json())
    elif markdown:
        print(ledger.profile_markdown(record, top=None if all_cells else limit, notebook_order=all_cells))
        if gpus:
            from nbscope.analyse.forecast import forecast as run_forecast
            from nbscope.render.forecast import forecast_markdown

            print(forecast_markdown(run_forecast(record, options.forecast, devices_file=devices, notebook_path=path)))
        if findings is not None:
            from nbscope.render.compare import findings_markdown

            print(findings_markdown(findings, record, top=TOP_FINDINGS, command=diagnose_command(record, store, devices)), end="")
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
            print_findings_end(record, findings, why_not, store, devices)


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
        commands = {r["backend"]: diagnose_command(result.record_of(r["backend"]), store) for r in result.runs if r["run_id"]}
        view.print_backends(result, store_path=store.path, commands=commands, diagnosis=diagnosis)
    # A backend JAX could not start is reported above, not counted as the notebook failing.
    return [r["record"] for r in result.runs if r["record"] is not None and r["available"]]


def probe_warnings(record: Any) -> list[str]:
    """The probe's warnings about the run (``kernel.warnings``), each naming its cell as the ledger does."""
    kernel = record.measurements.get("kernel")
    warnings = kernel.get("warnings") if isinstance(kernel, dict) else None
    if not isinstance(warnings, list):
        return []
    by_hash = {c.get("source_hash"): c for c in record.measurements.get("cells") or [] if isinstance(c, dict)}
    found = []
    for warning in warnings:
        if not isinstance(warning, dict):
            continue
        cell = by_hash.get(warning.get("hash"))
        where = f"cell {cell['index'] + 1}: " if cell is not None and isinstance(cell.get("index"), int) else ""
        found.append(f"{where}{warning.get('message', '')}")
    return found
