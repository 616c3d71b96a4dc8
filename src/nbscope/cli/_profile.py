"""``nbscope profile`` and ``nbscope trace``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from nbscope.cli import app, output_may_close
from nbscope.cli._after_run import TOP_FINDINGS, exit_if_failed, print_findings_end, with_diagnosis
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

if TYPE_CHECKING:
    from nbscope.api.profile import Notebook, ProfileOptions, ProfileOutcome, Store


def _warn_of(notebook: Notebook) -> None:
    for warning in notebook.warnings:  # a MyST file whose structure looks broken still runs, with a warning
        typer.echo(f"nbscope: warning: {warning}", err=True)


@app.command()
def profile(
    path: Annotated[Path, typer.Argument(help="Notebook: .ipynb or MyST .md")],
    db: DbOption = None,
    timeout: TimeoutOption = None,
    on_error: Annotated[str, typer.Option("--on-error", help="continue | stop")] = "continue",
    kernel: Annotated[str | None, typer.Option(help="Kernel name (default: the notebook's).")] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            help="KEY=VALUE for the kernel; repeatable. Values are stored as hashes (timing settings such as JAX_*, XLA_* stay readable).",
        ),
    ] = None,
    env_store_values: Annotated[
        bool, typer.Option("--env-store-values", help="Store --env values themselves, not their hashes.")
    ] = False,
    jax_platform: Annotated[
        str | None, typer.Option("--jax-platform", help="JAX_PLATFORMS for the kernel: cpu, cuda, ...")
    ] = None,
    jax_cache: Annotated[
        str,
        typer.Option(
            "--jax-cache",
            help="Persistent compile cache: off | cold | warm | DIR (cold removes only what JAX wrote in the store's own cache folder)",
        ),
    ] = "off",
    repeat: Annotated[int, typer.Option(help="Run N times, each in a fresh kernel; report medians.")] = 1,
    limit: Annotated[int, limit_option("Show the N slowest cells.")] = 15,
    all_cells: Annotated[bool, all_option("Show every cell, in notebook order.")] = False,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
    backends: Annotated[
        str | None,
        typer.Option(
            "--backends",
            help="Comma-separated JAX platforms (cpu,cuda; cpu,tpu): profile once per backend, compare, and "
            "recommend CPU, the accelerator or a mix.",
        ),
    ] = None,
    timeline: Annotated[
        bool,
        typer.Option(
            "--timeline", help="Trace each cell with jax.profiler: device busy, ops, dispatch, copies, class."
        ),
    ] = False,
    keep_traces: Annotated[
        Path | None, typer.Option("--keep-traces", metavar="DIR", help="Keep the raw traces here (implies --timeline).")
    ] = None,
    forecast: Annotated[
        str | None,
        typer.Option(
            "--forecast",
            metavar="GPU[,GPU...]",
            help="Record program data and forecast each cell on these GPUs (see `nbscope forecast --help`).",
        ),
    ] = None,
    programs: Annotated[
        bool,
        typer.Option(
            "--programs", help="Record program data (executions, loops, work) for a later `nbscope forecast`."
        ),
    ] = False,
    devices: DevicesOption = None,
    no_diagnose: NoDiagnoseOption = False,
    label: LabelOption = None,
    allow_errors: AllowErrorsOption = False,
) -> None:
    """Per-cell ledger of a notebook run in a real Jupyter kernel: wall, compile, run, compiles, memory; then its top
    findings (causes with their fixes; `nbscope diagnose RUN` shows them in full). Exits 1 when a cell failed
    (an error, a timeout, a dead kernel) unless --allow-errors."""
    from nbscope.api.profile import RunSpec, forecast_devices, parse_env, run_profile
    from nbscope.render.progress import ProfileProgress
    from nbscope.render.terminal import console

    options = RunSpec(
        timeout=timeout,
        on_error=on_error,
        kernel=kernel,
        env=parse_env(env or []),
        env_store_values=env_store_values,
        jax_platform=jax_platform,
        jax_cache=jax_cache,
        repeat=repeat,
        timeline=timeline or keep_traces is not None,
        keep_traces=keep_traces.resolve() if keep_traces else None,
        label=label,
    )
    options.validate()
    gpus = forecast_devices(forecast, devices)  # an unknown GPU is refused before anything runs
    options = options.for_forecast(gpus, programs=programs)
    store = open_store(db)
    if backends:
        _profile_backends(
            path,
            options,
            backends,
            store=store,
            as_json=as_json,
            markdown=markdown,
            diagnosis=not no_diagnose,
            allow_errors=allow_errors,
        )
        return
    progress = ProfileProgress(repeat, console.is_terminal and not (as_json or markdown))

    def on_notebook(notebook: Notebook) -> None:
        _warn_of(notebook)
        progress.start(notebook)

    with progress:
        outcome = run_profile(
            path,
            options,
            store,
            devices_file=devices,
            diagnose=not no_diagnose,
            allow_errors=allow_errors,
            on_notebook=on_notebook,
            on_cell_start=progress.started,
            on_cell_done=progress.done,
        )
    for warning in outcome.warnings:  # e.g. a notebook that removed nbscope's cell callbacks
        typer.echo(f"nbscope: warning: {warning}", err=True)
    with output_may_close():  # the reader of the output may have had enough; the exit status still tells
        _print_profile(
            outcome,
            store,
            options,
            devices=devices,
            as_json=as_json,
            markdown=markdown,
            limit=limit,
            all_cells=all_cells,
            no_diagnose=no_diagnose or outcome.not_stored is not None,
        )
    if outcome.not_stored is not None:  # the ledger first, then how to store it (exit 2)
        raise outcome.not_stored
    exit_if_failed(outcome.failed, allow_errors)


def _print_profile(
    outcome: ProfileOutcome,
    store: Store,
    options: ProfileOptions,
    *,
    devices: Path | None,
    as_json: bool,
    markdown: bool,
    limit: int,
    all_cells: bool,
    no_diagnose: bool,
) -> None:
    """The profile's output: its ledger (JSON, markdown or a table), forecast, timeline and top findings."""
    from nbscope.api.profile import diagnose_command
    from nbscope.render import ledger
    from nbscope.render.terminal import console, literal

    record, findings, why_not = outcome.record, outcome.findings, outcome.why_not_diagnosed
    if as_json:
        print(
            json.dumps(with_diagnosis(record, findings, why_not), indent=1, default=str)
            if not no_diagnose
            else record.to_json()
        )
    elif markdown:
        print(ledger.profile_markdown(record, top=None if all_cells else limit, notebook_order=all_cells))
        if outcome.forecast is not None:
            from nbscope.render.forecast import forecast_markdown

            print(forecast_markdown(outcome.forecast))
        if findings is not None:
            from nbscope.render.findings import findings_markdown

            print(
                findings_markdown(findings, record, top=TOP_FINDINGS, command=diagnose_command(record, store, devices)),
                end="",
            )
    else:
        ledger.print_profile(record, top=None if all_cells else limit, notebook_order=all_cells)
        if options.timeline:
            from nbscope.render.timeline import print_timeline

            print_timeline(record)
        if outcome.forecast is not None:
            from nbscope.render.forecast import print_forecast

            print_forecast(outcome.forecast)
        if record.run_id is not None:
            console.print(f"[dim]saved as run {record.run_id} in {literal(store.path)}[/dim]")
        if not no_diagnose:
            print_findings_end(record, findings, why_not, store, devices)


def _profile_backends(
    path: Path,
    options: ProfileOptions,
    backends: str,
    *,
    store: Store,
    as_json: bool,
    markdown: bool,
    diagnosis: bool,
    allow_errors: bool,
) -> None:
    """Profile once per backend and print their comparison; exits 1 when a cell failed a backend's run."""
    from nbscope.api.backends import run_backends
    from nbscope.render import backends as view
    from nbscope.render.terminal import console

    quiet = as_json or markdown
    outcome = run_backends(
        path,
        options,
        backends,
        store,
        on_backend=None if quiet else lambda b: console.print(f"[dim]profiling with JAX_PLATFORMS={b} …[/dim]"),
    )
    result = outcome.result
    if as_json:
        document = result.to_dict()
        if not diagnosis:
            document.pop("diagnosis", None)
        print(json.dumps(document, indent=1, default=str))
    elif markdown:
        print(view.backends_markdown(result), end="")
    else:
        view.print_backends(
            result, store_path=store.path, commands=dict(outcome.diagnose_commands), diagnosis=diagnosis
        )
    exit_if_failed(outcome.failed, allow_errors)
