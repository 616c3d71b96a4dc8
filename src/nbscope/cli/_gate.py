"""The `nbscope gate` command: a regression gate between a baseline and a candidate run (exit 1 on a slowdown)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Annotated, TextIO

import typer

from nbscope.api import NbscopeError
from nbscope.cli import app, output_may_close
from nbscope.cli._options import DbOption, JsonOption, MarkdownOption, all_option, open_store, run_help


@app.command()
def gate(
    candidate: Annotated[
        str,
        typer.Option("--candidate", metavar="RUN", help=run_help("The run judged") + " latest: the newest run (of --target if given)."),
    ] = "latest",
    baseline: Annotated[
        str,
        typer.Option(
            "--baseline",
            metavar="RUN",
            help=run_help("The run it is judged against") + " latest: the last earlier complete run with the "
            "candidate's notebook, kind, digest and settings that passed the gate (else the newest never judged; "
            "runs that failed are skipped).",
        ),
    ] = "latest",
    target: Annotated[str | None, typer.Option(help="With --candidate latest: the notebook (a path, or its stored name).")] = None,
    db: DbOption = None,
    max_slowdown: Annotated[str, typer.Option("--max-slowdown", help="Allowed slowdown: 10%, 0.1 or 1.1x.")] = "10%",
    alpha: Annotated[float, typer.Option(help="Significance level of the Mann–Whitney test (with --repeat samples).")] = 0.05,
    min_cell: Annotated[float, typer.Option("--min-cell", help="Cells faster than this (s) in both runs are not judged.")] = 0.05,
    floor: Annotated[float, typer.Option(help="Absolute changes below this (s) are noise.")] = 0.02,
    mad_k: Annotated[float, typer.Option("--mad-k", help="... and so are changes below K × the samples' MAD.")] = 3.0,
    history: Annotated[
        int,
        typer.Option(
            "--history",
            help="Estimate run-to-run noise from up to N earlier runs of the notebook in the same environment (0: off).",
        ),
    ] = 10,
    ignore_status: Annotated[
        bool, typer.Option("--ignore-status", help="Do not fail when a cell that ran in the baseline fails now.")
    ] = False,
    confirm: Annotated[
        bool,
        typer.Option("--confirm", help="Before failing on a slowdown, profile the candidate's notebook once more "
                     "(stored as a new run) and fail only if that rerun is slower too (a failing cell is not rerun)."),
    ] = False,
    everything: Annotated[bool, all_option("List every cell, not only those that moved.")] = False,
    summary: Annotated[
        Path | None,
        typer.Option("--summary", help="Append the markdown summary to this file (e.g. \"$GITHUB_STEP_SUMMARY\")."),
    ] = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
) -> None:
    """Fail (exit 1) when a candidate run is significantly slower than a baseline, per cell or in total."""
    from nbscope.api.gate import GateOptions, gate_stored, parse_slowdown
    from nbscope.render.gate import gate_markdown, print_gate

    # Never made here: verdicts (and --confirm's rerun) are written only to a store that holds the candidate.
    store = open_store(db, read_only=True)
    options = GateOptions(
        max_slowdown=parse_slowdown(max_slowdown), alpha=alpha, min_cell_s=min_cell, abs_floor_s=floor,
        mad_k=mad_k, check_status=not ignore_status,
    )
    options.validate()
    # Opened before the gate runs: a target that cannot be appended to is refused before a verdict is stored.
    handle = _open_summary(summary) if summary is not None else None
    try:
        result = gate_stored(store, candidate=candidate, baseline=baseline, target=target, options=options,
                             history=history, confirm=confirm)
        text = gate_markdown(result, everything=everything)
        if handle is not None and summary is not None:
            _append(handle, summary, text + "\n")
    finally:
        if handle is not None and summary is not None:
            _close(handle, summary)
    with output_may_close():  # a closed pipe ends the printing, not the verdict's exit status
        if as_json:
            print(json.dumps(result.to_dict(), indent=1, default=str))
        elif markdown:
            print(text)
        else:
            print_gate(result, everything=everything)
    raise typer.Exit(result.exit_code)


def _open_summary(summary: Path) -> TextIO:
    """``--summary`` opened for appending; a target that cannot take it (a directory, a missing folder, no
    permission, /proc), a FIFO or socket (opening one would wait for a reader) and a file this command reads
    (the run store) are a one-line error, exit 2."""
    from nbscope.api.files import refuse_input

    if summary.is_dir():
        raise NbscopeError(f"--summary {summary} is a directory")
    refuse_input(summary, option="--summary")
    try:
        mode = os.stat(summary).st_mode
    except OSError:
        mode = 0
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket"
        raise NbscopeError(f"--summary {summary} is {kind}, not a file to append to")
    try:
        return open(summary, "a", encoding="utf-8")
    except OSError as exc:
        raise NbscopeError(f"--summary {summary}: cannot append to it ({exc.strerror or exc})") from None


def _append(handle: TextIO, summary: Path, text: str) -> None:
    from nbscope.api.files import redact

    try:
        handle.write(redact(text))  # as every file nbscope writes (a run given as a file was read unredacted)
        handle.flush()  # now, so that a full disk (/dev/full) is this one-line error
    except OSError as exc:
        raise NbscopeError(f"--summary {summary}: cannot append to it ({exc.strerror or exc})") from None


def _close(handle: TextIO, summary: Path) -> None:
    try:
        handle.close()
    except OSError as exc:
        raise NbscopeError(f"--summary {summary}: cannot append to it ({exc.strerror or exc})") from None
