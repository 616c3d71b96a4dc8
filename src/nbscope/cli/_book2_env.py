"""The `nbscope book2-env` command: the jupyter-book 2 that `--via book2` uses, in an environment of nbscope's own."""

from __future__ import annotations

from typing import Annotated

import typer

from nbscope.cli import app
from nbscope.cli._options import JsonOption

INSTALL_HELP = ("Install jupyter-book 2 in nbscope's own environment (from the package index) when none is found, "
                "and mystmd (the `myst` command) with npm when none is found and npm is there.")


@app.command("book2-env")
def book2_env(
    install: Annotated[bool, typer.Option("--install", help=INSTALL_HELP)] = False,
    as_json: JsonOption = False,
) -> None:
    """The jupyter-book 2 that `pathways --via book2` uses (and the mystmd that `trace -- myst build` uses): print a folder to put first on PATH so that
    `jupyter book ...` runs it (it shares jupyter-book 1's package name, so nbscope keeps one in an
    environment of its own, under its cache folder): export PATH="$(nbscope book2-env):$PATH"."""
    import json

    from nbscope.api import NbscopeError, jupyter_book2

    found = jupyter_book2.find()
    if install and not found.command:
        jupyter_book2.install()
        found = jupyter_book2.find()
    myst = jupyter_book2.find_myst()
    if install and not myst.command:
        try:  # mystmd is optional beside jupyter-book 2: without npm, say so and go on
            jupyter_book2.install_myst()
        except NbscopeError as exc:
            typer.echo(f"nbscope: note: {exc}", err=True)
        myst = jupyter_book2.find_myst()
    if as_json:
        print(json.dumps({"command": found.command, "path_folder": str(found.path_folder or "") or None,
                          "version": found.version, "origin": found.origin, "problem": found.problem,
                          "environment": str(jupyter_book2.environment_dir()),
                          "myst": {"command": myst.command, "version": myst.version, "origin": myst.origin,
                                   "problem": myst.problem, "folder": str(jupyter_book2.myst_dir())}}, indent=1))
        if not found.usable:
            raise typer.Exit(1)
        return
    if not found.usable:
        raise NbscopeError(found.problem or "jupyter-book 2 is not available")
    print(found.path_folder)
    typer.echo(f"jupyter-book {found.version} from {found.origin}: {' '.join(found.command)}", err=True)
    typer.echo(f"mystmd {myst.version} from {myst.origin}: {' '.join(myst.command)}" if myst.usable
               else f"mystmd: {myst.problem}", err=True)
