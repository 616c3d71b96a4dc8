"""The `nbscope gate` command: a regression gate between a baseline and a candidate run (exit 1 on a slowdown)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from nbscope.cli import app, output_may_close
from nbscope.cli._options import DbOption, JsonOption, MarkdownOption, all_option, open_store, run_help


@app.command()
def gate(
    candidate: Annotated[
        str,
        typer.Option(
            "--candidate",
            metavar="RUN",
            help=run_help("The run judged") + " latest: the newest run (of --target if given).",
        ),
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
    target: Annotated[
        str | None, typer.Option(help="With --candidate latest: the notebook (a path, or its stored name).")
    ] = None,
    db: DbOption = None,
    max_slowdown: Annotated[
        str,
        typer.Option(
            "--max-slowdown",
            help="Allowed slowdown: 10%, 0.1 (a bare number is a fraction, at most 1) or 1.1x (a ratio).",
        ),
    ] = "10%",
    alpha: Annotated[
        float, typer.Option(help="Significance level of the Mann–Whitney test (with --repeat samples).")
    ] = 0.05,
    min_cell: Annotated[
        float, typer.Option("--min-cell", help="Cells faster than this (s) in both runs are not judged.")
    ] = 0.05,
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
        typer.Option(
            "--confirm",
            help="Before failing on a slowdown, profile the candidate's notebook once more "
            "(stored as a new run) and fail only if that rerun is slower too (a failing cell is not rerun).",
        ),
    ] = False,
    everything: Annotated[bool, all_option("List every cell, not only those that moved.")] = False,
    summary: Annotated[
        Path | None,
        typer.Option("--summary", help='Append the markdown summary to this file (e.g. "$GITHUB_STEP_SUMMARY").'),
    ] = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
) -> None:
    """Fail (exit 1) when a candidate run is significantly slower than a baseline, per cell or in total."""
    from nbscope.api.gate import GateRequest, run_gate
    from nbscope.render.gate import gate_markdown, print_gate

    # Never made here: verdicts (and --confirm's rerun) are written only to a store that holds the candidate.
    store = open_store(db, read_only=True)
    request = GateRequest(
        candidate=candidate,
        baseline=baseline,
        target=target,
        max_slowdown=max_slowdown,
        alpha=alpha,
        min_cell_s=min_cell,
        floor_s=floor,
        mad_k=mad_k,
        check_status=not ignore_status,
        history=history,
        confirm=confirm,
        summary=summary,
    )
    result = run_gate(store, request, summary_text=lambda judged: gate_markdown(judged, everything=everything))
    with output_may_close():  # a closed pipe ends the printing, not the verdict's exit status
        if as_json:
            print(json.dumps(result.to_dict(), indent=1, default=str))
        elif markdown:
            print(gate_markdown(result, everything=everything))
        else:
            print_gate(result, everything=everything)
    raise typer.Exit(result.exit_code)
