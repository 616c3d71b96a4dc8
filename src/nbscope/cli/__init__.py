"""Stage 6, cli: the command-line face of nbscope: thin commands over the Python API.

Each command lives in the module named for it (``cli/_<command>.py``; ``_runs`` holds the store's runs, show, export
and import, ``_cells`` cells and lectures; ``_options`` and ``_after_run`` are shared): a module parses options,
calls one function of the library and renders what it returns.

typer, click and rich are imported only when a command is parsed by them: a command line that ``cli/_fast.py``
reads whole (``publish STORE -o SITE``, the command a CI job runs after each build) runs without them, through the
same function as its typer command, with the same output and errors; anything else it leaves to typer.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from nbscope import __version__
from nbscope.api import NbscopeError, whole
from nbscope.cli._session import command_session, stop_exit_code, stop_message, stopped_by_signal

if TYPE_CHECKING:
    import click
    import typer
    from click.parser import _OptionParser


def _make_app() -> typer.Typer:
    """The typer app the command modules register their commands on (``from nbscope.cli import app``)."""
    import typer

    made = typer.Typer(
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

    @made.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
        ),
    ) -> None:
        """nbscope: profile notebooks per cell, compare machines and backends, diagnose slow cells."""

    return made


def __getattr__(name: str) -> typer.Typer:
    """``app``, made (and typer imported) when first asked for: by a command module, or to parse a command."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    made = globals()["app"] = _make_app()
    return made


def _app() -> typer.Typer:
    made: typer.Typer = globals()["app"] if "app" in globals() else __getattr__("app")
    return made


# The module that registers each command. ``nbscope CMD`` imports only CMD's module: a command's start-up
# then pays for its own imports, not for every other command's (benchmarks/cli_latency.py).
COMMAND_MODULES: dict[str, str] = {
    "profile": "_profile",
    "trace": "_trace",
    "bench": "_bench",
    "loops": "_loops",
    "pathways": "_pathways",
    "versions": "_versions",
    "bisect": "_versions",
    "show": "_runs",
    "runs": "_runs",
    "export": "_runs",
    "import": "_runs",
    "cells": "_cells",
    "lectures": "_cells",
    "history": "_history",
    "publish": "_publish",
    "diagnose": "_diagnose",
    "compare": "_compare",
    "forecast": "_forecast",
    "gate": "_gate",
    "try": "_try",
    "report": "_report",
    "import-jupyter-cache": "_import_jupyter_cache",
    "audit": "_audit",
    "merge": "_audit",
    "info": "_info",
    "book2-env": "_book2_env",
    "target-env": "_target_env",
}


def _register_commands(only: str | None = None) -> None:
    """Add the commands to ``app`` by importing their modules: ``only`` that command's when it names one
    (``nbscope --help``, a mistyped command and the API register every one)."""
    import importlib

    modules = [COMMAND_MODULES[only]] if only in COMMAND_MODULES else sorted(set(COMMAND_MODULES.values()))
    for module in modules:
        importlib.import_module(f"nbscope.cli.{module}")


def _command_named(argv: list[str]) -> str | None:
    """The command ``argv`` runs: its first word, when no option comes before it (the root takes only
    ``--version`` and ``--help``)."""
    return argv[0] if argv and not argv[0].startswith("-") else None


# ``nbscope --help`` lists the commands in the order of use, one panel per step.
COMMAND_GROUPS: dict[str, tuple[str, ...]] = {
    "Record: run notebooks and measure": ("profile", "trace", "bench", "loops", "pathways", "versions"),
    "Look at stored runs": ("show", "runs", "cells", "lectures", "history"),
    "Explain: causes and forecasts": ("diagnose", "try", "compare", "forecast"),
    "Decide: regressions": ("gate", "bisect"),
    "Share: reports and records": ("report", "publish", "export", "import", "import-jupyter-cache"),
    "Fleet: every notebook of a book": ("audit", "merge"),
    "Setup": ("info", "book2-env", "target-env"),
}


def _group_commands(group: click.Group) -> None:
    """Order ``group``'s commands as COMMAND_GROUPS says and name each one's help panel; a command missing from
    COMMAND_GROUPS comes last, under "Other"."""
    order = [name for names in COMMAND_GROUPS.values() for name in names if name in group.commands]
    order += [name for name in group.commands if name not in order]
    panels = {name: panel for panel, names in COMMAND_GROUPS.items() for name in names}
    group.commands = {name: group.commands[name] for name in order}
    for name, sub in group.commands.items():
        sub.rich_help_panel = panels.get(name, "Other")  # type: ignore[attr-defined]


def build_command(only: str | None = None) -> click.Command:
    """The click command behind ``app``, every command registered (grouped in the order of use), or ``only``
    that one when it names a command, with help that shows only real defaults.

    An option or argument without a default (``None``, or a required one) would show ``[default: None]``;
    it is turned off here, once, for every command, so that commands added later need nothing of their own.
    """
    import click
    import typer.core
    import typer.main

    _register_commands(only)
    command = typer.main.get_command(_app())
    if isinstance(command, click.Group):
        _group_commands(command)
    commands = list(command.commands.values()) if isinstance(command, click.Group) else [command]
    for sub in [command, *commands]:
        for param in sub.params:
            # typer makes every parameter one of these two, which both carry show_default (click's base does not)
            if (param.default is None or param.required) and isinstance(
                param, (click.Option, typer.core.TyperArgument)
            ):
                param.show_default = False
            if isinstance(param, click.Option) and param.envvar is None:
                param.show_envvar = False  # typer shows every option's, and a bad value said "(env var: 'None')"
        sub.make_parser = _given_once(sub.make_parser)  # type: ignore[method-assign,assignment]
    return command


def _given_once(make_parser: Callable[[click.Context], _OptionParser]) -> Callable[[click.Context], _OptionParser]:
    """``make_parser``, whose parser refuses an option of one value given twice (``--device tpu-v5e --gpu t4``,
    ``--cache on --cache off``): click keeps the last one, silently."""
    import click

    def made(ctx: click.Context) -> _OptionParser:
        parser = make_parser(ctx)
        parse = parser.parse_args

        def parse_once(args: list[str]) -> tuple[dict[str, object], list[str], list[click.Parameter]]:
            values, rest, order = parse(args)
            single = [  # (a plain flag given twice says the same thing twice)
                p
                for p in order
                if isinstance(p, click.Option) and not (p.multiple or p.count or p.is_flag and not p.secondary_opts)
            ]
            if twice := next((p for p in single if single.count(p) > 1), None):
                names = "/".join([*twice.opts, *twice.secondary_opts])
                raise click.UsageError(f"{names} is given more than once: give it once", ctx)
            return values, rest, order

        parser.parse_args = parse_once  # type: ignore[method-assign]
        return parser

    return made


def _wants_version(argv: list[str]) -> bool:
    # ``--version`` works after any command too (``nbscope profile --version``), but never after ``--``.
    head = argv[: argv.index("--")] if "--" in argv else argv
    return "--version" in head


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one-line errors with exit code 2 instead of tracebacks; on SIGINT, SIGTERM or
    SIGHUP, what was measured is saved and the exit code is 128 + the signal (130, 143, 129)."""
    args = list(sys.argv[1:] if argv is None else argv)
    _standard_streams()
    for name in ("COLUMNS", "LINES"):  # rich (typer's console too) reads them with int() once isdigit() passes: ²
        if name in os.environ and whole(os.environ[name], 1) is None:
            del os.environ[name]
    if _wants_version(args):
        print(f"nbscope {__version__}")
        raise SystemExit(0)
    from nbscope.cli._fast import fast_command

    fast = fast_command(args)
    if fast is not None:
        with command_session(console=False):
            _run(fast, args)
    else:
        command = build_command(_command_named(args))
        with command_session():
            _run(lambda: _invoke(command, args), args)


def _standard_streams() -> None:
    """A standard stream the shell closed (``nbscope gate >&-``) is the null device: the command runs and exits as
    it would with its output discarded, and no file nbscope opens (the store) takes the stream's number, where a
    kernel's or a traced command's output would land."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False))


def _run(invoke: Callable[[], None], args: list[str]) -> None:
    """Run the command (``invoke`` ends with SystemExit); what it raises becomes a one-line error, a signal's
    exit code, or the exit status."""
    try:
        invoke()
    except NbscopeError as exc:
        _print_error(f"nbscope: error: {exc}")
        raise SystemExit(stop_exit_code() if stopped_by_signal() else exc.exit_code) from None
    except KeyboardInterrupt:
        _stopped()
    except SystemExit as exc:
        # typer turns a KeyboardInterrupt into exit 130 itself; a signal decides the code here.
        if stopped_by_signal():
            _stopped()
        if exc.code == 1 and _output_closed():
            # click's or rich's answer to a closed output pipe (`nbscope runs | head -1`): the reader had
            # enough. A command whose exit status is a verdict keeps 1: its verdict was not reached.
            quiet_stdout()
            raise SystemExit(1 if _gives_verdict(args) else 0) from None
        try:
            sys.stdout.flush()  # now, not at exit, where a closed pipe prints a traceback
        except (BrokenPipeError, ValueError):
            quiet_stdout()
        raise
    except BrokenPipeError:
        quiet_stdout()
        raise SystemExit(0) from None
    except OSError as exc:
        # Output to a terminal that SIGHUP closed fails; what was measured is already saved.
        if not stopped_by_signal():
            from nbscope.api.files import machine_limit

            limit = machine_limit(exc)  # ulimit -f, a full disk, a read-only mount: one line, as what they are
            if limit is None:
                raise
            _print_error(f"nbscope: error: {limit}")
            raise SystemExit(limit.exit_code) from None
        _stopped()


def _invoke(command: click.Command, args: list[str]) -> None:
    """Run ``command`` as click's standalone mode would, but a usage error (an unknown option, a missing
    argument, a bad value) is one line, ``nbscope: error: ...``, exit 2, as every other error: not click's
    usage, hint and box. With no arguments at all, the help has been printed already (exit 2, as before)."""
    import click

    try:
        code = command.main(args=args, prog_name="nbscope", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError:
        raise SystemExit(2) from None
    except click.UsageError as exc:
        where = f" (see '{exc.ctx.command_path} -h')" if exc.ctx is not None else ""
        message = " ".join(exc.format_message().split())
        raise NbscopeError(f"{message}{where}") from None
    except click.ClickException as exc:  # a file option click opened itself, and the like
        _print_error(f"nbscope: error: {' '.join(exc.format_message().split())}")
        raise SystemExit(exc.exit_code) from None
    except click.Abort:
        _print_error("nbscope: aborted")
        raise SystemExit(1) from None
    raise SystemExit(code if isinstance(code, int) else 0)


# Commands whose exit status says more than "done" (a gate, findings, failed cells or groups).
VERDICT_COMMANDS = frozenset(
    {
        "audit",
        "bench",
        "bisect",
        "book2-env",
        "diagnose",
        "gate",
        "import",
        "info",
        "loops",
        "merge",
        "pathways",
        "target-env",
        "profile",
        "trace",
        "versions",
    }
)


def _gives_verdict(args: list[str]) -> bool:
    head = args[: args.index("--")] if "--" in args else args
    if "--help" in head or "-h" in head:
        return False
    command = next((a for a in head if not a.startswith("-")), None)
    return command in VERDICT_COMMANDS


def _output_closed() -> bool:
    """Whether standard output met a closed pipe: click then wraps it, rich points it at the null device."""
    # Only click wraps it: a command run without click has no wrapper.
    if "click.utils" in sys.modules and isinstance(sys.stdout, sys.modules["click.utils"].PacifyFlushWrapper):
        return True
    try:
        out, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError, AttributeError):
        return False
    return (out.st_dev, out.st_ino) == (null.st_dev, null.st_ino)


@contextmanager
def output_may_close() -> Iterator[None]:
    """Around a command's printing: a closed output pipe ends the printing quietly, not the command, whose exit
    status (a verdict) still follows."""
    try:
        yield
    except BrokenPipeError:
        quiet_stdout()
    except SystemExit as exc:  # rich's answer to a closed pipe: standard output at the null device, exit 1
        if exc.code != 1 or not _output_closed():
            raise


def quiet_stdout() -> None:
    """The output pipe closed (its reader had enough): what is still to be printed goes nowhere, quietly,
    as Python's documentation advises (standard output pointed at the null device)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _stopped() -> None:
    _print_error(stop_message())
    raise SystemExit(stop_exit_code()) from None


def _print_error(text: str) -> None:
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
