"""Eager-op flood: many small compiles of eager operations (``jnp.ones(n)``, ``x * 2`` on a new shape),
each costing milliseconds, typically a Python loop of array operations outside jit."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from nbscope.analyse.diagnose._base import Context, Finding, Outcome, Rule, seconds, severity

NAME = "eager-flood"
THRESHOLDS = {
    "min_eager_compiles": 20,  # eager-op compiles in one cell ...
    "min_eager_s": 0.3,  # ... taking at least this many seconds
}


def evaluate(ctx: Context) -> Iterator[Outcome]:
    limit = ctx.limits(NAME, THRESHOLDS)
    for cell in ctx.run.cells:
        eager = cell.jax.of_kind("eager") if cell.jax else ()
        compiles = sum(f.count - f.cache_hits for f in eager)
        spent = sum(f.compile_s for f in eager)
        if compiles < limit["min_eager_compiles"] or spent < limit["min_eager_s"]:
            continue
        ops = Counter({f.name: f.count for f in eager})
        shapes = {s for f in eager for s in f.shapes}
        wall = cell.notebook_wall_s or 0.0  # nbscope's own collection left out
        yield Finding(
            rule=NAME,
            title="Eager-op compile flood",
            cell_index=cell.index,
            severity=severity(spent, ctx.total_wall),
            confidence=0.9,
            evidence={
                "eager_compiles": compiles,
                "eager_compile_s": round(spent, 4),
                "wall_s": round(wall, 4),
                "share_of_cell": round(spent / wall, 3) if wall else None,
                "ops": dict(ops.most_common(8)),
                "distinct_shapes": len(shapes),
                "seconds_at_stake": round(spent, 4),
            },
            summary=(
                f"{compiles} compiles of eager operations on {len(shapes)} argument shapes: {seconds(spent)} of the "
                f"cell's {seconds(wall)}"
            ),
            highlights=[
                ("operations", ", ".join(f"{n} ×{k}" for n, k in ops.most_common(4))),
                ("shapes", f"{len(shapes)} distinct argument shapes"),
            ],
            action="put the loop's array work into one `@jax.jit` function",
            fix=(
                "Put the array work of the loop into one `@jax.jit` function (one compile instead of one per operation "
                "and shape), keep shapes fixed across iterations, or use NumPy for small arrays handled one by one."
            ),
        )


RULE = Rule(NAME, evaluate, thresholds=THRESHOLDS)
