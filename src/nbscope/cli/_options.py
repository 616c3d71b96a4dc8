"""Options shared by several commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from nbscope.record.store import Store

DbOption = Annotated[
    Path | None,
    typer.Option("--db", envvar="NBSCOPE_DB", help="Run store (SQLite). Default: .nbscope/nbscope.db"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
MarkdownOption = Annotated[bool, typer.Option("--markdown", help="Print a GitHub-ready markdown table.")]


def warn(message: str) -> None:
    """One line on stderr that does not stop the command."""
    print(f"nbscope: warning: {message}", file=sys.stderr)


def open_store(db: Path | None) -> Store:
    """The run store; a row it cannot read is reported on stderr (one line) and left out."""
    return Store(db, on_skip=warn)
