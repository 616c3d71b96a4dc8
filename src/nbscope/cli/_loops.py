"""``nbscope loops``: per-iteration cost of a loop from a sweep of trip counts, per device."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated

import typer

from nbscope.cli import app
from nbscope.cli._options import DbOption, JsonOption, LabelOption, open_store


def _trip_counts(text: str | None) -> list[int] | None:
    from nbscope.api import NbscopeError, whole

    if not text:
        return None
    counts = [whole(part, 0, 2**31 - 1) for part in text.split(",") if part.strip()]  # JAX counts in 32 bits
    if None in counts:
        raise NbscopeError(f"--trips expects comma-separated trip counts (a trip count is at most {2**31 - 1})")
    return typing.cast(list[int], counts)


@app.command()
def loops(
    target: Annotated[
        str | None,
        typer.Argument(
            help="MODULE:FUNCTION; FUNCTION(n) runs the loop n times. Default: the built-in logistic-map lax.scan."
        ),
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer trip counts and samples (≈10 s).")] = False,
    trips: Annotated[
        str | None, typer.Option("--trips", metavar="N,N,...", help="Trip counts to sweep (default 1k … 1M).")
    ] = None,
    at: Annotated[int, typer.Option("--at", metavar="N", help="Extrapolate the fit to this trip count.")] = 10_000_000,
    device: Annotated[
        str,
        typer.Option(
            "--device", metavar="default,cpu", help="Where to run: the default device and/or pinned to the CPU."
        ),
    ] = "default,cpu",
    samples: Annotated[
        int | None, typer.Option("--samples", help="Timed samples per trip count (median kept).")
    ] = None,
    xla_dump: Annotated[
        Path | None, typer.Option("--xla-dump", metavar="DIR", help="Dump XLA's HLO here (XLA_FLAGS=--xla_dump_to).")
    ] = None,
    jax_platform: Annotated[
        str | None,
        typer.Option("--jax-platform", metavar="PLATFORM", help="JAX_PLATFORMS for the sweep (cpu, cuda, ...)."),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    label: LabelOption = None,
) -> None:
    """Sweep a loop's trip count, fit time = a + b·n, report µs per iteration and extrapolate (fresh process)."""
    from nbscope.api.loops import LoopOptions
    from nbscope.api.loops import loops as run_loops
    from nbscope.render.loops import loops_progress, print_loops_saved

    options = LoopOptions(
        target=target,
        quick=quick,
        trip_counts=_trip_counts(trips),
        at=at,
        placements=[p.strip() for p in device.split(",") if p.strip()],
        samples=samples,
        xla_dump=xla_dump,
        jax_platform=jax_platform,
    )
    options.validate()
    store = open_store(db)  # refuse a bad --db before measuring
    outcome = run_loops(options, store, label=label, progress=loops_progress(quiet=as_json))
    if as_json:
        print(outcome.record.to_json())
    else:
        print_loops_saved(outcome.record, outcome.store_path)
