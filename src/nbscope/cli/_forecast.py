"""``nbscope forecast``: a profile run's time on a named GPU, per cell, from a CPU run."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from nbscope.cli import app
from nbscope.cli._options import (
    DbOption,
    DevicesOption,
    JsonOption,
    MarkdownOption,
    all_option,
    limit_option,
    open_store,
    run_help,
)

if TYPE_CHECKING:
    from nbscope.api.forecast import DeviceTable, Forecast, Store

HELP = """Forecast a notebook's time on a GPU from a run profiled on a CPU, per cell, and why.

RUN is a profile recorded with program data: `nbscope profile NOTEBOOK --forecast t4` (or --programs).

What the numbers mean: CPU is the cell's time measured in that run. The GPU forecast is a low–high
range in seconds: host work (Python, NumPy, Numba) is carried over as measured, XLA:GPU compile is
derived from this CPU's compile time (a derived ratio you can calibrate), calls pinned to the CPU stay
as measured, and every other JAX program run the cell made is forecast from its optimised HLO and its
lowering for the GPU: loops at the GPU's per-iteration cost (µs per iteration, host-driven;
more when an iteration waits for the host), arithmetic and memory traffic on a roofline of the GPU's
peak FLOP/s and bandwidth, kernel launches, jitted-call dispatch and host↔device copies. The dominant
term names what decides the cell, its parts and its total ("lax.scan of 10,000,000 iterations × (8–8.2
µs step + …) = 1 min 20 s–1 min 22 s"). Verdicts: faster or slower beyond ±10 %, similar within it,
uncertain when the range straddles the CPU time or the dominant term is wider than ×4 (it says what is
unknown and what would settle it); a cell that raised, died or timed out is not forecast. The notebook's
verdict says which functions to keep on the CPU and the code change.

Each device figure has a source (datasheet, published measurement, or derived and labelled so): see
--json, docs/forecast.md, and calibrate a GPU you have with --calibrate-from on `nbscope loops` and
`nbscope bench` runs made on it. With --measured GPU_RUN (a profile of the same notebook on that GPU),
each cell's forecast is shown against what the GPU measured, compile left out of both, with the error.
The same forecast feeds `nbscope diagnose` (GPU rules as forecast risks), `nbscope audit --forecast`
and `nbscope compare` of a CPU run with a GPU run.
"""


CompileBudgetOption = Annotated[
    float,
    typer.Option(
        "--compile-budget",
        metavar="SECONDS",
        min=1,
        max=86_400,
        help="For a TPU: at most this many seconds compiling the run's programs for it here "
        "(`nbscope target-env tpu --install` makes the environment that does it; cached by program).",
    ),
]


@app.command("forecast", help=HELP)
def forecast_command(
    run: Annotated[
        str | None,
        typer.Argument(metavar="RUN", help=run_help("A profile run (needed unless --list or --calibrate-from)")),
    ] = None,
    gpu: Annotated[
        str,
        typer.Option(
            "--gpu",
            "--device",
            metavar="DEVICE[,DEVICE...]",
            help="Devices of the table (t4, l4, a10g, a100, h100, h200, tpu-v5e, or your own); all: every one, "
            "side by side.",
        ),
    ] = "t4",
    devices: DevicesOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
    limit: Annotated[int, limit_option("Show the N cells the GPU changes most.")] = 15,
    all_cells: Annotated[bool, all_option("Show every cell, in notebook order.")] = False,
    notebook: Annotated[
        Path | None,
        typer.Option("--notebook", help="The profiled notebook, for exact code changes (default: its recorded path)."),
    ] = None,
    calibrate_from: Annotated[
        list[str] | None,
        typer.Option(
            "--calibrate-from",
            metavar="RUN",
            help="Build a device entry from `nbscope loops` / `nbscope bench` runs made on a GPU (repeatable).",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="With --calibrate-from: the new device's key.")] = None,
    base: Annotated[
        str | None, typer.Option("--base", help="With --calibrate-from: take figures the runs lack from this device.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--append-to", metavar="FILE", help="With --calibrate-from: append the entry to this device file."
        ),
    ] = None,
    list_devices: Annotated[
        bool, typer.Option("--list", help="List the device table with each figure's source.")
    ] = False,
    measured: Annotated[
        str | None,
        typer.Option(
            "--measured",
            metavar="RUN",
            help="A profile of the same notebook on the GPU: forecast vs measured per cell, and the error.",
        ),
    ] = None,
    compile_budget: CompileBudgetOption = 600.0,
) -> None:
    from nbscope.api.forecast import device_table, forecast_run

    _refuse_unread(
        {"RUN": run, "--measured": measured, "--notebook": notebook, "--calibrate-from": calibrate_from},
        {"--name": name, "--base": base, "--append-to": output},
        "--list" if list_devices else "--calibrate-from" if calibrate_from else "RUN",
    )
    table = device_table(devices)
    if list_devices:
        _list(table, as_json)
        return
    store = open_store(db, read_only=True)
    if calibrate_from:
        _calibrate(calibrate_from, name, base, output, table, store, as_json)
        return
    forecast_with = partial(forecast_run, compile_budget_s=compile_budget, on_progress=_progress)
    found = forecast_with(run, store, table, gpus=gpu, notebook=notebook, measured=measured)
    _show(found, as_json, markdown, None if all_cells else limit, all_cells)


def _show(result: Forecast, as_json: bool, markdown: bool, top: int | None, show_all: bool) -> None:
    from nbscope.render import forecast as view

    if as_json:
        print(json.dumps(result.to_dict(), indent=1, default=str))
    elif markdown:
        print(view.forecast_markdown(result, top=top, show_all=show_all))
    else:
        view.print_forecast(result, top=top, show_all=show_all)


def _progress(line: str) -> None:
    typer.echo(f"nbscope: {line}", err=True)


def _list(table: DeviceTable, as_json: bool) -> None:
    from nbscope.render.forecast import device_table_document, print_device_table

    if as_json:
        print(json.dumps(device_table_document(table), indent=1))
    else:
        print_device_table(table)


def _calibrate(
    runs: list[str],
    name: str | None,
    base: str | None,
    output: Path | None,
    table: DeviceTable,
    store: Store,
    as_json: bool,
) -> None:
    from nbscope.api.files import is_stdout
    from nbscope.api.forecast import append_device, calibrate_device

    calibrated = calibrate_device(runs, name, base, table, store)
    if output is not None and is_stdout(output):
        output = None  # the entry is printed below, once: standard output is no device file to append to
    if as_json:
        print(json.dumps(calibrated.to_dict(), indent=1))
    else:
        print(calibrated.text, end="")
    if output is not None:
        append_device(output, calibrated)
        print(f"# appended to {output}: use it with --devices {output} or NBSCOPE_DEVICES={output}")


def _refuse_unread(reads: dict[str, object], calibration: dict[str, object], way: str) -> None:
    """Refuse an option the chosen way of running forecast (``--list``, ``--calibrate-from``, a RUN) would leave
    unread, silently."""
    from nbscope.api import NbscopeError

    unread = {
        "--list": {**reads, **calibration},
        "--calibrate-from": {k: v for k, v in reads.items() if k != "--calibrate-from"},
        "RUN": calibration,
    }[way]
    if (extra := next((key for key, value in unread.items() if value), None)) is not None:
        raise NbscopeError(f"{extra} does nothing {'without --calibrate-from' if way == 'RUN' else 'with ' + way}")
