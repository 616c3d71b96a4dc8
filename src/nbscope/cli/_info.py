"""The `nbscope info` command: this machine's fingerprint, or the fields two fingerprints differ in."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nbscope.cli import app, output_may_close
from nbscope.cli._options import JsonOption


@app.command()
def info(
    as_json: JsonOption = False,
    jax: Annotated[bool, typer.Option("--jax", help="Also initialise JAX: backend, devices, x64 (slow).")] = False,
    diff: Annotated[
        tuple[Path, Path] | None,
        typer.Option("--diff", metavar="A.json B.json", help="List the fields that differ between two fingerprints."),
    ] = None,
    volatile: Annotated[
        bool, typer.Option("--volatile", help="With --diff: also compare volatile fields (load, clocks, free memory).")
    ] = False,
) -> None:
    """The machine fingerprint: CPU, memory, BLAS, GPUs, library versions, settings that change timings.

    With --diff, the exit status is 0 when the fingerprints agree and 1 when fields differ (as in diff).
    """
    from nbscope.api.info import info as run_info
    from nbscope.render import terminal
    from nbscope.render.info import info_json

    outcome = run_info(include_jax=jax, diff=diff, include_volatile=volatile)
    if diff is not None and outcome.differences is not None:
        with output_may_close():  # a closed pipe ends the printing, not the verdict's exit status
            if as_json:
                print(info_json(outcome.fingerprint, outcome.differences))
            else:
                terminal.print_fingerprint_diff(list(outcome.differences), str(diff[0]), str(diff[1]))
        raise typer.Exit(outcome.exit_status)
    if as_json:
        print(info_json(outcome.fingerprint, outcome.differences))
    else:
        terminal.print_fingerprint(outcome.fingerprint or {})
