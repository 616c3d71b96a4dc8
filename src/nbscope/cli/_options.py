"""Options shared by several commands, and the CLI side of run references, output files and output formats.

One option means one thing everywhere: ``--limit N`` caps the rows shown, ``--all`` shows every row,
``--timeout`` is a per-cell limit, ``-o/--output FILE`` writes the command's file, ``--json`` and
``--markdown`` choose the output format (one of them), ``--label`` names the runs a command records.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import click
import typer

from nbscope.api import NbscopeError, runs
from nbscope.api.files import is_stdout
from nbscope.api.runs import LABEL_ENV, RUN_REFERENCE, Store, check_label

DbOption = Annotated[
    Path | None,
    typer.Option(
        "--db",
        envvar="NBSCOPE_DB",
        help="Run store (SQLite). Default: .nbscope/nbscope.db at the project root (git work tree, book root or this folder).",
    ),
]


# The output formats a command prints; naming two is refused (--json --markdown used to give JSON silently).
def _one_format(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        chosen = ctx.meta.setdefault("nbscope_formats", [])
        chosen.append(param.opts[0])
        if len(chosen) > 1:
            raise NbscopeError(f"{' and '.join(chosen)} are output formats; choose one")
    return value


JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.", callback=_one_format)]
MarkdownOption = Annotated[
    bool, typer.Option("--markdown", help="Print a GitHub-ready markdown table.", callback=_one_format)
]

# ---- runs ------------------------------------------------------------------------------------------


def run_help(what: str = "The run") -> str:
    """Help text of an argument or option that takes a run reference."""
    return f"{what}: {RUN_REFERENCE}."


RunArgument = Annotated[str, typer.Argument(metavar="RUN", help=run_help())]

# The label is checked as the options are parsed; the command hands it to the API, whose runs carry it (never
# os.environ).
LabelOption = Annotated[
    str | None,
    typer.Option(
        "--label",
        envvar=LABEL_ENV,
        callback=check_label,
        help="Label the runs this command records (e.g. main-cpu); name them later as LABEL or LABEL:NOTEBOOK.",
    ),
]

# ---- rows, limits, output --------------------------------------------------------------------------


def limit_option(help: str) -> Any:
    """``--limit N`` (``-n``): at most N rows; what the rows are is said in ``help``."""
    return typer.Option("--limit", "-n", min=1, help=help)


def all_option(help: str = "Show every row.") -> Any:
    """``--all``: every row (where --limit would cut)."""
    return typer.Option("--all", help=help)


DevicesOption = Annotated[
    Path | None,
    typer.Option(
        "--devices",
        metavar="FILE",
        help="Device file adding or overriding GPUs of the forecast (default: $NBSCOPE_DEVICES, else "
        "devices.toml in ~/.config/nbscope).",
    ),
]

TimeoutOption = Annotated[
    float | None, typer.Option("--timeout", metavar="SECONDS", help="Per-cell time limit in seconds.")
]


def output_option(help: str) -> Any:
    """``-o/--output FILE``: write the command's file there (in an existing folder, an existing regular file
    replaced atomically; ``-`` or ``/dev/stdout``: standard output)."""
    return typer.Option("-o", "--output", metavar="FILE", help=f"{help} '-' writes to standard output.")


def confirm_written(message: str, path: Path | str | None) -> None:
    """A command's "written to FILE" line: on stdout, except when the file itself went to stdout."""
    print(message, file=sys.stderr if path is None or is_stdout(path) else sys.stdout)


def warn(message: str) -> None:
    """One line on stderr that does not stop the command."""
    print(f"nbscope: warning: {message}", file=sys.stderr)


def open_store(db: Path | None, *, read_only: bool = False) -> Store:
    """The run store; a row it cannot read is reported on stderr (one line) and left out. A read-only
    store (commands that only read runs) is never created: reading one that is not there is an error."""
    return runs.open_store(db, on_skip=warn, read_only=read_only)


NoDiagnoseOption = Annotated[
    bool, typer.Option("--no-diagnose", help="Do not end with the run's top findings (nor add them to --json).")
]
AllowErrorsOption = Annotated[
    bool,
    typer.Option(
        "--allow-errors",
        help="Exit 0 although a cell raised, timed out or killed its kernel (as nbclient's "
        "and jupyter-book's allow_errors); without it such a run exits 1. The run is stored either way.",
    ),
]
