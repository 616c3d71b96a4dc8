"""Unsynchronised timing: a cell times JAX work without waiting for it.

JAX dispatches asynchronously (on CPU too), so ``time.perf_counter()`` around ``f(x)`` measures the
dispatch, not the computation. Found statically in the cell source: a timed region (``%time``,
``%timeit``, ``with qe.Timer()``, ``timeit.timeit``, or the statements between two clock reads) that
starts JAX work and contains nothing that waits for a result (``block_until_ready``, ``.item()``,
``float()``, ``print``, ``np.asarray``, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypedDict

from nbscope.analyse.diagnose import _source
from nbscope.analyse.diagnose._base import Context, Finding, Outcome, Rule, Skip

NAME = "unsynchronised-timing"


class _Region(TypedDict):
    how: str
    line_in_cell: int
    jax_calls: list[str]


def evaluate(ctx: Context) -> Iterator[Outcome]:
    if not any(c.jax for c in ctx.run.cells):
        return  # JAX never imported: nothing can run asynchronously
    if not ctx.has_sources:
        yield Skip(NAME, f"needs the cell sources to find timed regions: {ctx.missing_sources()}")
        return
    code = ctx.code
    for cell in ctx.run.cells:
        source = ctx.source(cell)
        tree = _source.parse(source) if source is not None else None
        if tree is None:
            continue
        index = cell.index
        jitted = ctx.jax_functions_at(index)
        unsynced: list[_Region] = []
        for region in _source.timed_regions(tree):
            work = _source.jax_calls(region.nodes, jitted, code.jax_aliases)
            if work and not _source.synchronisations(region.nodes, code.numpy_arrays):
                unsynced.append({"how": region.how, "line_in_cell": region.line, "jax_calls": sorted(set(work))[:8]})
        if not unsynced:
            continue
        first = unsynced[0]
        direct = any(
            name.split(".")[0] in code.jax_aliases or name in code.jitted_at(index)
            for r in unsynced
            for name in r["jax_calls"]
        )
        yield Finding(
            rule=NAME,
            title="Unsynchronised timing",
            cell_index=cell.index,
            severity="medium",  # the printed figures are wrong; nothing is slow because of it
            confidence=0.85 if direct else 0.7,
            evidence={
                "regions": unsynced,
                "synchronisation_found": False,
                "cell_wall_s": cell.wall_s,
                "reported_times": "not checked: run records keep no cell outputs",
                "seconds_at_stake": 0.0,
            },
            summary=(
                f"times {', '.join(f'`{n}`' for n in first['jax_calls'][:3])} with {first['how']} but never waits for the "
                "result: it measures JAX's asynchronous dispatch, not the computation"
            ),
            highlights=[
                ("timed", f"{r['how']} at line {r['line_in_cell']}: {', '.join(r['jax_calls'][:3])}")
                for r in unsynced[:2]
            ]
            + [("printed times", "not checked: run records keep no cell outputs")],
            action="wait inside the timed region: `f(x).block_until_ready()`",
            fix=(
                "Wait for the result inside the timed region: `f(x).block_until_ready()` (or "
                "`jax.block_until_ready(out)` for pytrees), e.g. `%timeit f(x).block_until_ready()`; time a second call "
                "so the compile is not included."
            ),
        )


RULE = Rule(NAME, evaluate)
