"""The command-line face of nbscope: thin commands over the Python API.

Each feature registers its commands from its own module (``cli/_<feature>.py``) so features stay apart.
"""

from __future__ import annotations

import sys

import typer

from nbscope._errors import NbscopeError
from nbscope._version import __version__

app = typer.Typer(
    name="nbscope",
    help="Per-cell profiles of numerical notebooks: where the time went (compile, run, dispatch, transfer) and why.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        print(f"nbscope {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """nbscope: profile notebooks per cell, compare machines and backends, diagnose slow cells."""


def _register_commands() -> None:
    # Imported for their side effect of adding commands to ``app``.
    from nbscope.cli import _core  # noqa: F401

    for name in ("_profile", "_bench", "_pathways", "_compare", "_loops", "_history", "_audit", "_forecast"):
        try:
            __import__(f"nbscope.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"nbscope.cli.{name}":
                raise


def _wants_version(argv: list[str]) -> bool:
    # ``--version`` works after any command too (``nbscope profile --version``), but never after ``--``.
    head = argv[: argv.index("--")] if "--" in argv else argv
    return "--version" in head


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one-line errors with exit code 2 instead of tracebacks."""
    args = list(sys.argv[1:] if argv is None else argv)
    if _wants_version(args):
        print(f"nbscope {__version__}")
        raise SystemExit(0)
    _register_commands()
    try:
        app(args=args, prog_name="nbscope", standalone_mode=True)
    except NbscopeError as exc:
        print(f"nbscope: error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        print("nbscope: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
