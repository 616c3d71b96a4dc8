"""The `nbscope diagnose` command: named causes of slow cells, with their evidence and fixes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from nbscope.api import NbscopeError, decimal
from nbscope.cli import app, output_may_close
from nbscope.cli._options import DbOption, DevicesOption, JsonOption, MarkdownOption, limit_option, open_store, run_help


@app.command("diagnose")
def diagnose_command(
    run: Annotated[str, typer.Argument(metavar="RUN", help=run_help("A profile run"))],
    other: Annotated[
        str | None,
        typer.Option(
            "--other",
            metavar="RUN",
            help="A second run of the same notebook (CPU run for a GPU run, warm-cache run) used as evidence.",
        ),
    ] = None,
    notebook: Annotated[
        Path | None, typer.Option("--notebook", help="The notebook's source, when it is not where the run recorded it.")
    ] = None,
    rule: Annotated[list[str] | None, typer.Option("--rule", help="Only this rule (repeatable).")] = None,
    limit: Annotated[int | None, limit_option("Show at most N findings.")] = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            metavar="GPU[,GPU...]",
            help="On a CPU run with program data: forecast the GPU rules for these GPUs "
            "(default: those of `profile --forecast`, else t4).",
        ),
    ] = None,
    devices: DevicesOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show each finding's whole evidence.")] = False,
    threshold: Annotated[
        list[str] | None,
        typer.Option(
            "--threshold",
            metavar="RULE.NAME=VALUE",
            help="Override one rule's threshold, e.g. host-loop.min_run_s=5 (repeatable).",
        ),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
    try_fixes: Annotated[
        bool,
        typer.Option(
            "--try",
            help="Try each finding whose fix is a remedy of `nbscope try` (fresh kernels, as it is and with the remedy; "
            "stored as trial runs) and add what it measured to the finding.",
        ),
    ] = False,
    repeats: Annotated[
        int | None, typer.Option("--repeats", metavar="K", help="With --try: runs each way (3).")
    ] = None,
    through_cell: Annotated[
        bool,
        typer.Option(
            "--through-cell",
            help="With --try: run each notebook only through the finding's cell (the notebook's total is then "
            "through it).",
        ),
    ] = False,
    fail_on: Annotated[
        str | None,
        typer.Option(
            "--fail-on", metavar="medium|high", help="Exit 1 when a finding is this severe or worse (as linters do)."
        ),
    ] = None,
) -> None:
    """Named causes of slow or wrongly timed cells: each a sentence with its numbers, the fix and a few lines of
    evidence (--verbose: all of it).

    On a CPU run recorded with program data (`nbscope profile --forecast t4`), the GPU rules (latency-bound
    loop, weak float64) fire as forecast risks, labelled "forecast", with the backend recommendation the
    forecast makes."""
    from nbscope.api.diagnose import diagnose_run
    from nbscope.render import backends
    from nbscope.render import findings as view
    from nbscope.render.terminal import print_record_header

    if repeats is not None and not try_fixes:
        raise NbscopeError("--repeats applies to the trials of --try: add --try")
    outcome = diagnose_run(
        run,
        open_store(db, read_only=not try_fixes),
        other=other,
        notebook=notebook,
        rules=rule,
        gpus=gpu,
        devices_file=devices,
        thresholds=_thresholds(threshold or []),
        fail_on=fail_on,
        try_repeats=(3 if repeats is None else repeats) if try_fixes else None,
        try_through_cell=through_cell,
    )
    record, findings, recommendation = outcome.record, outcome.findings, outcome.recommendation
    with output_may_close():  # a closed pipe ends the printing, not the verdict's exit status
        if as_json:
            document = {"run_id": record.run_id, "target": record.target, **findings.to_dict()}
            if recommendation is not None:
                document["recommendation"] = recommendation.to_dict()
            print(json.dumps(document, indent=1, default=str))
        elif markdown:
            print(view.findings_markdown(findings, record), end="")
            if recommendation is not None:
                print("\n" + backends.recommendation_markdown(recommendation), end="")
        else:
            print_record_header(record)
            view.print_findings(findings, record, limit=limit, verbose=verbose)
            if recommendation is not None:
                backends.print_recommendation(recommendation)
    raise typer.Exit(outcome.exit_status)


def _thresholds(pairs: list[str]) -> dict[str, dict[str, float]]:
    """``RULE.NAME=VALUE`` options as diagnose()'s thresholds (which refuses unknown rules and names)."""
    thresholds: dict[str, dict[str, float]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        rule, dot, name = key.strip().rpartition(".")
        number = decimal(value)
        if not sep or not dot or not rule or not name or number is None:
            raise NbscopeError(
                f"--threshold expects RULE.NAME=NUMBER (e.g. compile-bound.min_compile_s=0.1), got {pair!r}"
            )
        thresholds.setdefault(rule, {})[name] = number
    return thresholds
