"""``nbscope bench``: the hardware benchmark suite."""

from __future__ import annotations

from typing import Annotated

import typer

from nbscope.api import NbscopeError
from nbscope.cli import app, output_may_close
from nbscope.cli._options import DbOption, JsonOption, LabelOption, MarkdownOption, open_store


@app.command()
def bench(
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            metavar="GROUP[,GROUP]",
            help="Run only these groups: python, numpy, numba, jax, multi-size, dispatch, transfer, loops.",
        ),
    ] = None,
    dtype: Annotated[
        str,
        typer.Option(
            "--dtype",
            metavar="float32|float64|both",
            help="Float dtype for NumPy, Numba and JAX alike (float64 turns on jax_enable_x64 in the JAX groups).",
        ),
    ] = "float32",
    size: Annotated[
        str,
        typer.Option(
            "--size",
            metavar="quick|default|seed",
            help="Problem sizes: quick (≈20 s), default, or seed (the original suite: 10 M int sum, 1 M "
            "square roots, 3000² matmul, 50 M elements).",
        ),
    ] = "default",
    jax_platform: Annotated[
        str | None,
        typer.Option("--jax-platform", metavar="PLATFORM", help="JAX_PLATFORMS for the JAX groups (cpu, cuda, ...)."),
    ] = None,
    pathway: Annotated[
        str | None,
        typer.Option(
            "--pathway",
            metavar="PATHWAY[,PATHWAY]",
            help="Run the workloads as notebook cells through these pathways (script, kernel, book, book2) and compare.",
        ),
    ] = None,
    repeat: Annotated[int, typer.Option("--repeat", help="With --pathway: runs per pathway.")] = 1,
    db: DbOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
    label: LabelOption = None,
) -> None:
    """Benchmark this machine: each group in a fresh process, first calls apart, steady state from repeats.

    Groups whose library is missing are skipped with the reason; the exit status is 1 when a group failed.
    """
    from nbscope.api.bench import bench as run_bench
    from nbscope.render.bench import bench_markdown, bench_progress, print_bench
    from nbscope.render.pathways import emit_pathways, pathways_progress

    if repeat < 1:  # refused even where it is unused (without --pathway): a bad option is never ignored
        raise NbscopeError("--repeat must be at least 1")
    store = open_store(db)  # refuse a bad --db before spending minutes measuring
    outcome = run_bench(
        store,
        only=only,
        dtype=dtype,
        size=size,
        jax_platform=jax_platform,
        label=label,
        progress=bench_progress(),
        via=pathway,
        repeat=repeat,
        via_progress=pathways_progress() if pathway else None,
    )
    record = outcome.record
    if outcome.via:
        emit_pathways(record, as_json=as_json, markdown=markdown, store_path=store.path)
        if outcome.exit_status:
            raise typer.Exit(outcome.exit_status)
        return
    with output_may_close():  # a closed pipe ends the printing, not the verdict's exit status
        if as_json:
            print(record.to_json())
        elif markdown:
            print(bench_markdown(record), end="")
        else:
            print_bench(record)
    if outcome.interrupted:
        raise KeyboardInterrupt
    if outcome.exit_status:
        raise typer.Exit(outcome.exit_status)
