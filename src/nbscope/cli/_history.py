"""``nbscope history``: a notebook's figures over time, with change points."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from nbscope.cli import app
from nbscope.cli._options import DbOption, JsonOption, MarkdownOption, limit_option, open_store


@app.command()
def history(
    target: Annotated[
        str,
        typer.Argument(
            metavar="TARGET",
            help="Notebook: a path from anywhere, or its name as `nbscope runs` lists it; or a benchmark suite.",
        ),
    ],
    db: DbOption = None,
    metric: Annotated[
        str, typer.Option(help="Figure from the run totals (or the cell with --cell): wall_s, compile_s, ...")
    ] = "wall_s",
    cell: Annotated[
        str | None,
        typer.Option(help="One cell instead of the total: #N (1-based), a source-hash prefix or source text."),
    ] = None,
    kind: Annotated[
        str | None, typer.Option(help="Only runs of this kind (profile, jupyter-cache, bench, ...).")
    ] = None,
    digest: Annotated[str | None, typer.Option(help="Only runs in this environment (fingerprint digest).")] = None,
    limit: Annotated[
        int | None, limit_option("At most the newest N runs per environment (default: every run).")
    ] = None,
    min_size: Annotated[int, typer.Option("--min-size", help="Fewest runs on each side of a change point.")] = 2,
    threshold: Annotated[float, typer.Option(help="Change score needed (shift in noise units, size-weighted).")] = 4.0,
    rel_floor: Annotated[
        float, typer.Option("--rel-floor", help="Ignore shifts below this fraction of the level.")
    ] = 0.10,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
) -> None:
    """A target's figures over time, per environment digest, with change points and a sparkline."""
    from nbscope.api.history import history as build_history
    from nbscope.render.history import history_markdown, print_history

    store = open_store(db, read_only=True)
    result = build_history(
        store,
        target,
        metric=metric,
        cell=cell,
        kind=kind,
        digest=digest,
        limit=limit,
        min_size=min_size,
        threshold=threshold,
        rel_floor=rel_floor,
    )
    if as_json:
        print(json.dumps(result.to_dict(), indent=1, default=str))
    elif markdown:
        print(history_markdown(result))
    else:
        print_history(result)
