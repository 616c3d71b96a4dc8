"""``nbscope compare``: two runs of a notebook side by side, cell by cell."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from nbscope.cli import app
from nbscope.cli._options import DbOption, JsonOption, MarkdownOption, limit_option, open_store, run_help


@app.command("compare")
def compare_command(
    a: Annotated[str, typer.Argument(metavar="A", help=run_help("Run A"))],
    b: Annotated[str, typer.Argument(metavar="B", help=run_help("Run B"))],
    db: DbOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
    limit: Annotated[
        int | None, limit_option("Show only the N cells that differ most (default: every cell, in notebook order).")
    ] = None,
    allow_different: Annotated[
        bool,
        typer.Option("--allow-different", help="Compare runs of two different notebooks (refused otherwise: exit 2)."),
    ] = False,
) -> None:
    """Two profile runs of a notebook side by side: cells paired by source, wall/compile/run per side, winner, totals, and the
    settings and machine differences that could explain them. A GPU run beside a CPU run recorded with program
    data (`profile --forecast`) also shows the CPU run's GPU forecast against what the GPU measured, per cell."""
    from nbscope.api.compare import compare
    from nbscope.render import backends
    from nbscope.render import compare as view
    from nbscope.render import forecast as forecast_view

    outcome = compare(a, b, open_store(db, read_only=True), allow_different=allow_different)
    comparison, recommendation, measured = outcome.comparison, outcome.recommendation, outcome.measured
    if as_json:
        document = comparison.to_dict()
        document["recommendation"] = recommendation.to_dict() if recommendation is not None else None
        if measured is not None:
            document["forecast_vs_measured"] = measured.to_dict()
        print(json.dumps(document, indent=1, default=str))
    elif markdown:
        text = view.comparison_markdown(comparison)
        if recommendation is not None:
            text += "\n" + backends.recommendation_markdown(recommendation)
        if measured is not None:
            text += "\n" + (
                forecast_view.measured_markdown(measured.comparison)
                if measured.comparison
                else f"_forecast vs measured: {measured.note}_\n"
            )
        print(text, end="")
    else:
        view.print_comparison(comparison, top=limit)
        if recommendation is not None:
            backends.print_recommendation(recommendation)
        if measured is not None:
            if measured.comparison:
                forecast_view.print_measured(measured.comparison)
            else:
                print(f"forecast vs measured: {measured.note}")
