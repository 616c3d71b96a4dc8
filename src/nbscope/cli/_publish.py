"""``nbscope publish``: the book's status as a static site over the run store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nbscope.cli import app
from nbscope.cli._options import JsonOption


@app.command()
def publish(
    source: Annotated[
        Path,
        typer.Argument(
            metavar="STORE_OR_BOOK", help="A run store file, or a book or project folder whose .nbscope/ holds one."
        ),
    ],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="The site's folder (new, empty, or made by publish before).")
    ],
    full: Annotated[
        bool, typer.Option("--full", help="Build every row and page again, not only what changed.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """A static site of the book's status: a page per book and per lecture, status.json and status.md."""
    from nbscope.cli._fast import publish_and_print

    publish_and_print(source, output, full=full, as_json=as_json)
