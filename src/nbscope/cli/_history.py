"""``nbscope history``, ``gate`` and ``import-jupyter-cache``: a notebook's runs over time, and judging the newest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from nbscope._errors import NbscopeError
from nbscope.cli import app
from nbscope.cli._options import DbOption, JsonOption, MarkdownOption, all_option, limit_option, open_store, run_help


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
    metric: Annotated[str, typer.Option(help="Figure from the run totals (or the cell with --cell): wall_s, compile_s, ...")] = "wall_s",
    cell: Annotated[
        str | None, typer.Option(help="One cell instead of the total: #N (1-based), a source-hash prefix or source text.")
    ] = None,
    kind: Annotated[str | None, typer.Option(help="Only runs of this kind (profile, jupyter-cache, bench, ...).")] = None,
    digest: Annotated[str | None, typer.Option(help="Only runs in this environment (fingerprint digest).")] = None,
    limit: Annotated[int | None, limit_option("At most the newest N runs per environment (default: every run).")] = None,
    min_size: Annotated[int, typer.Option("--min-size", help="Fewest runs on each side of a change point.")] = 2,
    threshold: Annotated[float, typer.Option(help="Change score needed (shift in noise units, size-weighted).")] = 4.0,
    rel_floor: Annotated[float, typer.Option("--rel-floor", help="Ignore shifts below this fraction of the level.")] = 0.10,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
) -> None:
    """A target's figures over time, per environment digest, with change points and a sparkline."""
    from nbscope.analyse.history import ChangeOptions
    from nbscope.analyse.history import history as build_history
    from nbscope.record.cells import target_aliases
    from nbscope.render.gate import history_markdown, print_history

    if min_size < 1:
        raise NbscopeError("--min-size must be at least 1")
    options = ChangeOptions(min_size=min_size, k=threshold, rel_floor=rel_floor)
    result = build_history(
        open_store(db, read_only=True), target, metric=metric, cell=cell, kind=kind, digest=digest, limit=limit,
        options=options, aliases=target_aliases(target),
    )
    if as_json:
        print(json.dumps(result.to_dict(), indent=1, default=str))
    elif markdown:
        print(history_markdown(result))
    else:
        print_history(result)


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
    everything: Annotated[bool, all_option("List every cell, not only those that moved.")] = False,
    summary: Annotated[
        Path | None,
        typer.Option("--summary", help="Append the markdown summary to this file (e.g. \"$GITHUB_STEP_SUMMARY\")."),
    ] = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
) -> None:
    """Fail (exit 1) when a candidate run is significantly slower than a baseline, per cell or in total."""
    from nbscope.analyse.gate import GateOptions, parse_slowdown
    from nbscope.api.gate import gate_stored
    from nbscope.render.gate import gate_markdown, print_gate

    store = open_store(db, read_only=True)  # verdicts are written only to a store that holds the candidate
    options = GateOptions(
        max_slowdown=parse_slowdown(max_slowdown), alpha=alpha, min_cell_s=min_cell, abs_floor_s=floor,
        mad_k=mad_k, check_status=not ignore_status,
    )
    options.validate()
    result = gate_stored(store, candidate=candidate, baseline=baseline, target=target, options=options,
                         history=history)
    text = gate_markdown(result, everything=everything)
    if summary is not None:
        if summary.is_dir():
            raise NbscopeError(f"--summary {summary} is a directory")
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")
    if as_json:
        print(json.dumps(result.to_dict(), indent=1, default=str))
    elif markdown:
        print(text)
    else:
        print_gate(result, everything=everything)
    raise typer.Exit(result.exit_code)


@app.command("import-jupyter-cache")
def import_jupyter_cache(
    path: Annotated[Path, typer.Argument(help="jupyter-book 1's jupyter-cache (_build/.jupyter_cache or its global.db), "
                                              "jupyter-book 2's _build/execute, or the book's folder.")],
    db: DbOption = None,
    fingerprint: Annotated[
        Path | None,
        typer.Option(help="Fingerprint of the machine that built the book (`nbscope info --json` output); default: this machine."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Turn jupyter-book's cached execution times (jupyter-book 1 or 2) into runs (kind jupyter-cache), one per
    notebook execution."""
    from nbscope.api import info as api
    from nbscope.record.jupyter_cache import import_cache

    given = api.load_fingerprint(fingerprint) if fingerprint is not None else None
    store = open_store(db)
    records, skipped = import_cache(
        path, store, fingerprint=given, fingerprint_source=str(fingerprint) if fingerprint else None
    )
    if as_json:
        print(json.dumps({"imported": [r.to_dict() | {"run_id": r.run_id} for r in records], "skipped": skipped},
                         indent=1, default=str))
        return
    from rich.markup import escape

    from nbscope.render.terminal import console, format_seconds

    for record in records:
        console.print(
            f"run {record.run_id}: {escape(record.target)} · {format_seconds(record.measurements['totals']['wall_s'])}"
            f" · executed {record.started_at[:19].replace('T', ' ')} UTC",
            highlight=False,
        )
    console.print(f"imported {len(records)} run(s) into {escape(str(store.path))}; {skipped} already there", highlight=False)
