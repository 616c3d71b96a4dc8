"""``nbscope pathways``: the same notebook as a script, in a Jupyter kernel and in a jupyter-book build."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from nbscope.cli import app
from nbscope.cli._options import DbOption, JsonOption, MarkdownOption, open_store


def stderr_progress() -> Any:
    """Progress lines on stderr, so --json and --markdown output stays clean on stdout."""
    from rich.console import Console

    status = Console(stderr=True, highlight=False)

    def progress(event: str, payload: dict[str, Any]) -> None:
        run = f" (repeat {payload['repeat'] + 1})" if payload.get("repeat") else ""
        if event == "start":
            status.print(f"[dim]pathways: {payload['pathway']}{run} …[/dim]")
        elif payload.get("status") != "ok":
            status.print(f"[dim]pathways: {payload['pathway']}{run}: {payload['status']} – {payload.get('reason')}[/dim]")

    return progress


@app.command()
def pathways(
    path: Annotated[Path, typer.Argument(help="Notebook: .ipynb or MyST .md")],
    via: Annotated[
        str,
        typer.Option("--via", metavar="PATHWAY[,PATHWAY]", help="script, kernel, book (jupyter-book 1), book2 (jupyter-book 2)."),
    ] = "script,kernel,book",
    repeat: Annotated[int, typer.Option(help="Run each pathway N times (interleaved); report medians and spread.")] = 1,
    timeout: Annotated[float | None, typer.Option(help="Per-cell time limit in seconds, in every pathway.")] = None,
    kernel: Annotated[str | None, typer.Option(help="Kernel name (default: the notebook's).")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE for the notebook's process; repeatable.")] = None,
    jax_platform: Annotated[str | None, typer.Option("--jax-platform", help="JAX_PLATFORMS in every pathway.")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
) -> None:
    """Run a notebook through a script, a Jupyter kernel and a jupyter-book build; pair its cells and say
    whether the pathway explains a difference, with each pathway's fixed costs apart from the cells."""
    from nbscope.api.pathways import parse_via, run_pathways
    from nbscope.api.profile import parse_env

    names = parse_via(via)  # one-line errors before anything starts
    overrides = parse_env(env or [])
    store = open_store(db)
    record = run_pathways(
        path, names, repeat, store, timeout=timeout, kernel=kernel, env=overrides, jax_platform=jax_platform,
        progress=stderr_progress(),
    )
    _emit(record, as_json=as_json, markdown=markdown, store=store)


def bench_through_pathways(
    pathway: str,
    *,
    only: list[str] | None,
    dtype: str,
    size: str,
    jax_platform: str | None,
    repeat: int = 1,
    store: Any = None,
    as_json: bool = False,
    markdown: bool = False,
) -> None:
    """``nbscope bench --pathway script,kernel,book``: the suite's workloads through each pathway, printed
    like ``nbscope pathways`` (called by cli/_bench.py)."""
    from nbscope.api.pathways import parse_via, run_bench_pathways

    record = run_bench_pathways(
        via=parse_via(pathway), only=only, dtype=dtype, size=size, jax_platform=jax_platform, repeat=repeat,
        store=store, progress=stderr_progress(),
    )
    _emit(record, as_json=as_json, markdown=markdown, store=store)


def _emit(record: Any, *, as_json: bool, markdown: bool, store: Any) -> None:
    """Print a pathways record as JSON, markdown or tables; exit 1 when the run failed."""
    if as_json:
        print(record.to_json())
    elif markdown:
        from nbscope.render.pathways import pathways_markdown

        print(pathways_markdown(record), end="")
    else:
        from nbscope.render.pathways import print_pathways
        from nbscope.render.terminal import console

        print_pathways(record)
        if store is not None and record.run_id is not None:
            console.print(f"[dim]saved as run {record.run_id} in {store.path}[/dim]")
    if record.status == "error":
        raise typer.Exit(1)
