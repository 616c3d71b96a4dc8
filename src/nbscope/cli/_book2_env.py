"""The `nbscope book2-env` command: the jupyter-book 2 that `--via book2` uses, in an environment of nbscope's own."""

from __future__ import annotations

from typing import Annotated

import typer

from nbscope.api import NbscopeError
from nbscope.cli import app
from nbscope.cli._options import JsonOption

INSTALL_HELP = (
    "Install jupyter-book 2 in nbscope's own environment (from the package index) when none is found, "
    "and mystmd (the `myst` command) with npm when none is found and npm is there."
)


@app.command("book2-env")
def book2_env(
    install: Annotated[bool, typer.Option("--install", help=INSTALL_HELP)] = False, as_json: JsonOption = False
) -> None:
    """The jupyter-book 2 that `pathways --via book2` uses (and the mystmd that `trace -- myst build` uses): print a folder to put first on PATH so that
    `jupyter book ...` runs it (it shares jupyter-book 1's package name, so nbscope keeps one in an
    environment of its own, under its cache folder): export PATH="$(nbscope book2-env):$PATH"."""
    from nbscope.api.jupyter_book2 import book2_env as find_book2_env
    from nbscope.render.book2_env import book2_env_found, book2_env_json

    env = find_book2_env(install_missing=install)
    for note in env.notes:  # mystmd is optional beside jupyter-book 2: without npm, say so and go on
        typer.echo(f"nbscope: note: {note}", err=True)
    if as_json:
        print(book2_env_json(env))
        if not env.book.usable:
            raise typer.Exit(1)
        return
    if not env.book.usable:
        raise NbscopeError(env.book.problem or "jupyter-book 2 is not available")
    print(env.book.path_folder)
    for line in book2_env_found(env):
        typer.echo(line, err=True)
