"""Command lines read without typer: the interpreter then starts without typer, click and rich (most of a short
command's start-up). Only a command line of the plainest form is read here, the rest (help, a mistake, any other
option's spelling) goes to typer, which says what is wrong as it always did; each command read here runs the very
function its typer command runs, so that its output is the same.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def fast_command(args: list[str]) -> Callable[[], None] | None:
    """What runs ``args`` without typer (it ends with SystemExit, as click's run of the command does); None when
    typer is to parse them."""
    if args[:1] == ["publish"]:
        return _publish(args[1:])
    return None


def _publish(args: list[str]) -> Callable[[], None] | None:
    """``publish STORE_OR_BOOK (-o|--output) SITE [--full] [--json]``, each once, in any order."""
    sources: list[str] = []
    outputs: list[str] = []
    flags = {"--full": False, "--json": False}
    words = iter(args)
    for word in words:
        if word in ("-o", "--output"):
            outputs.append(next(words, ""))
        elif word.startswith("--output="):
            outputs.append(word.removeprefix("--output="))
        elif word in flags and not flags[word]:
            flags[word] = True
        elif word.startswith("-"):
            return None  # help, --, any other option or spelling: typer's
        else:
            sources.append(word)
    if len(sources) != 1 or len(outputs) != 1 or not sources[0] or not outputs[0] or outputs[0].startswith("-"):
        return None
    source, output = Path(sources[0]), Path(outputs[0])

    def run() -> None:
        _as_click_runs(lambda: publish_and_print(source, output, full=flags["--full"], as_json=flags["--json"]))

    return run


def _as_click_runs(command: Callable[[], None]) -> None:
    """``command`` run as click runs a command (``nbscope.cli._invoke``): an end of input becomes "aborted" (exit 1);
    an interrupt (a stop signal) is left to the command's session, whose one line says what stopped it and what
    was saved; the end exit 0."""
    from nbscope.cli import _print_error

    try:
        command()
    except EOFError:
        print(file=sys.stderr)  # click's echo() before its Abort
        _print_error("nbscope: aborted")
        raise SystemExit(1) from None
    raise SystemExit(0)


def publish_and_print(source: Path, output: Path, *, full: bool, as_json: bool) -> None:
    """``nbscope publish``'s run and output, for its typer command and for the command line read here."""
    import json

    from nbscope.api.publish import publish as build_site
    from nbscope.render import site

    result = build_site(source, output, site=site, full=full)
    if as_json:
        print(json.dumps(result.to_dict(), indent=1))
        return
    print(
        f"{result.rows} lecture × runner rows from {result.runs} runs; {result.rows_rebuilt} rebuilt; "
        f"{len(result.pages_written)} pages written, {result.pages_kept} unchanged: {result.folder / 'index.html'}"
    )
