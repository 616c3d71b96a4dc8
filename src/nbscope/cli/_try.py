"""The `nbscope try` command: a remedy tried on one cell of a stored run's notebook, measured both ways."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from nbscope.cli import app
from nbscope.cli._options import DbOption, JsonOption, open_store, run_help


@app.command("try")
def try_command(
    run: Annotated[str, typer.Argument(metavar="RUN", help=run_help("The profile run to try a remedy on"))],
    cell: Annotated[
        int, typer.Option("--cell", metavar="N", help="The code cell (1-based, as the ledger numbers it).")
    ],
    remedy: Annotated[
        str,
        typer.Option(
            "--remedy",
            metavar="R",
            help="cpu (the cell on the CPU), cpu:FUNCTION (that function's calls), unroll:K (the cell's lax.scan and "
            "fori_loop unrolled K steps), xla-flags:FLAGS, x64:off, matmul-precision:highest|default, threads:N "
            "(BLAS, OpenMP, Numba) or cache:warm (a primed compile cache).",
        ),
    ],
    repeats: Annotated[int, typer.Option("--repeats", metavar="K", help="Runs each way, interleaved.")] = 3,
    through_cell: Annotated[
        bool,
        typer.Option(
            "--through-cell",
            help="Run each notebook only through the cell tried (the cells after it do not run; the notebook's "
            "total is then through it): a long notebook on a machine paid by the minute.",
        ),
    ] = False,
    env: Annotated[
        list[str] | None,
        typer.Option("--env", help="KEY=VALUE for the kernels, over the run's own; repeatable (hashed in the record)."),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Rerun the notebook as the run ran it, in fresh kernels, as it is and with a remedy applied to one cell (without
    editing the file), repeats interleaved: the cell's time and the notebook's total both ways with the gate's
    statistics, and whether the values the cell binds are equal. Both sides are stored as trial runs linked to RUN."""
    from nbscope.api.profile import parse_env
    from nbscope.api.trial import try_remedy
    from nbscope.render.trial import print_trial

    def progress(side: str, number: int, total: int) -> None:
        print(f"nbscope: {side} {number}/{total}", file=sys.stderr, flush=True)

    result = try_remedy(
        run,
        cell,
        remedy,
        open_store(db),
        repeats=repeats,
        progress=None if as_json else progress,
        through_cell=through_cell,
        env=parse_env(env or []),
    )
    if as_json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        print_trial(result)
