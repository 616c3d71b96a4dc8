"""``nbscope pathways``: the same notebook as a script, in a Jupyter kernel and in a jupyter-book build."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nbscope.cli import app
from nbscope.cli._options import DbOption, JsonOption, LabelOption, MarkdownOption, TimeoutOption, open_store


@app.command()
def pathways(
    path: Annotated[Path, typer.Argument(help="Notebook: .ipynb or MyST .md")],
    via: Annotated[
        str,
        typer.Option(
            "--via", metavar="PATHWAY[,PATHWAY]", help="script, kernel, book (jupyter-book 1), book2 (jupyter-book 2)."
        ),
    ] = "script,kernel,book",
    repeat: Annotated[int, typer.Option(help="Run each pathway N times (interleaved); report medians and spread.")] = 1,
    timeout: TimeoutOption = None,
    kernel: Annotated[str | None, typer.Option(help="Kernel name (default: the notebook's).")] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", help="KEY=VALUE for the notebook's process; repeatable.")
    ] = None,
    jax_platform: Annotated[str | None, typer.Option("--jax-platform", help="JAX_PLATFORMS in every pathway.")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
    label: LabelOption = None,
) -> None:
    """Run a notebook through a script, a Jupyter kernel and a jupyter-book build; pair its cells and say
    whether the pathway explains a difference, with each pathway's fixed costs apart from the cells."""
    from nbscope.api.pathways import parse_via, pathways_command
    from nbscope.api.profile import parse_env
    from nbscope.render.pathways import emit_pathways, pathways_progress

    names, overrides = parse_via(via), parse_env(env or [])  # one-line errors before anything starts
    outcome = pathways_command(
        path,
        names,
        repeat,
        open_store(db),
        timeout=timeout,
        kernel=kernel,
        env=overrides,
        jax_platform=jax_platform,
        label=label,
        progress=pathways_progress(),
    )
    emit_pathways(outcome.record, outcome.run, as_json=as_json, markdown=markdown, store_path=outcome.store.path)
    if outcome.exit_status:
        raise typer.Exit(outcome.exit_status)
