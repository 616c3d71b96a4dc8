"""The `nbscope target-env` command: the environment in which nbscope compiles a run's programs for a TPU."""

from __future__ import annotations

from typing import Annotated

import typer

from nbscope.api import NbscopeError
from nbscope.cli import app

INSTALL_HELP = "Make it from the package index when it is absent (jax[tpu] at this environment's jax version: ~1.3 GB)."


@app.command("target-env")
def target_env(
    platform: Annotated[str, typer.Argument(help="The target: tpu (a TPU v5e, compiled for with no chip present).")],
    install: Annotated[bool, typer.Option("--install", help=INSTALL_HELP)] = False,
) -> None:
    """Print the Python of nbscope's own environment holding libtpu with this jax, in which `forecast --device
    tpu-v5e` compiles a run's programs for the chip on this machine (XLA:TPU compiles for a TPU topology without
    one): its compile time, its cost of each program, its device memory and its errors, measured, not guessed."""
    from nbscope.api.forecast import target_environment

    if platform != "tpu":
        raise NbscopeError(f"no target environment for {platform!r}: the one target is tpu")
    python = target_environment(install, on_progress=lambda line: typer.echo(f"nbscope: {line}", err=True))
    if python is None:  # a finding, as book2-env's: exit 1
        typer.echo("nbscope: no target environment for tpu yet: `nbscope target-env tpu --install` makes one", err=True)
        raise typer.Exit(1)
    print(python)
