"""``nbscope cells`` and ``nbscope lectures``: views over a whole book, an audit or a set of runs."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from nbscope.cli import app
from nbscope.cli._options import DbOption, JsonOption, MarkdownOption, all_option, limit_option, open_store

RUNS_HELP = (
    "A book (folder, _toc.yml or myst.yml: the newest profile of each notebook), an audit (stored or a file from "
    "`audit -o` / `merge -o`), a label (the newest run of each notebook with it), or a run reference."
)


@app.command()
def cells(
    sources: Annotated[list[str], typer.Argument(metavar="BOOK|AUDIT|LABEL|RUN...", help=RUNS_HELP)],
    limit: Annotated[int, limit_option("Show the N slowest cells.")] = 20,
    everything: Annotated[bool, all_option("Show every cell, slowest first.")] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
) -> None:
    """The slowest cells across every notebook of a book, an audit or a set of runs, with each one's share."""
    from nbscope.api.book import cells as slowest_cells
    from nbscope.render.book import cells_markdown, print_cells

    data = slowest_cells(sources, open_store(db, read_only=True), limit=None if everything else limit)
    if as_json:
        print(json.dumps(data.to_dict(), indent=1, default=str))
    elif markdown:
        print(cells_markdown(data), end="")
    else:
        print_cells(data)


@app.command()
def lectures(
    a: Annotated[str, typer.Argument(metavar="A", help="The first set of runs. " + RUNS_HELP)],
    b: Annotated[str, typer.Argument(metavar="B", help="The second set (e.g. a GPU runner's, for a CPU runner's A).")],
    db: DbOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
) -> None:
    """Lecture by lecture, two sets of runs side by side (two runners' audits, two labels, two books'
    stores): each notebook's wall and compile time in A and B and the winner, then the totals."""
    from nbscope.api.book import lectures as by_lecture
    from nbscope.render.book import lectures_markdown, print_lectures

    data = by_lecture(a, b, open_store(db, read_only=True))
    if as_json:
        print(json.dumps(data.to_dict(), indent=1, default=str))
    elif markdown:
        print(lectures_markdown(data), end="")
    else:
        print_lectures(data)
