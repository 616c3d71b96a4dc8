"""First-call costs dominating a small notebook: importing JAX, initialising its backend and compiling
the PRNG (the first ``jax.random.normal`` costs ~1 s of compiles on a small CPU) are one-off costs that
swamp a notebook whose own work is small."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TypedDict

from nbscope.analyse.diagnose import _source
from nbscope.analyse.diagnose._base import Context, Finding, Outcome, Rule, Skip, seconds

NAME = "first-call"
THRESHOLDS = {
    "max_notebook_s": 30.0,  # a "small notebook": its wall time below this ...
    "min_share": 0.4,  # ... with at least this share of it in first-call costs
}
PRNG_MARKERS = (
    "threefry",
    "random",
    "normal",
    "uniform",
    "randint",
    "bernoulli",
    "gamma",
    "choice",
    "permutation",
    "_split",
    "fold_in",
    "prng",
    "_seed",
)


class _Compile(TypedDict):  # a PRNG function's first compile
    cell: int
    compile_s: float


def _is_prng(name: str) -> bool:
    lowered = name.lower()
    return any(marker in lowered for marker in PRNG_MARKERS)


def _imports_only(source: str | None) -> bool:
    tree = _source.parse(source) if source is not None else None
    return tree is not None and bool(tree.body) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body)


def evaluate(ctx: Context) -> Iterator[Outcome]:
    limit = ctx.limits(NAME, THRESHOLDS)
    wall = ctx.total_wall
    jax_cells = [c for c in ctx.run.cells if c.jax is not None]
    if not jax_cells or wall <= 0 or wall >= limit["max_notebook_s"]:
        return
    if not ctx.has_sources:
        yield Skip(NAME, f"needs the cell sources to tell the import cell from work: {ctx.missing_sources()}")
        return
    import_cell = jax_cells[0]  # the probe attaches to JAX during the cell that imports it
    import_s = (import_cell.wall_s or 0.0) if _imports_only(ctx.source(import_cell)) else None
    prng: dict[str, _Compile] = {}
    for cell in ctx.run.cells:
        for entry in cell.jax.functions if cell.jax else ():
            name = entry.name
            if entry.kind == "eager" and _is_prng(name) and name not in prng:
                prng[name] = {"cell": cell.index, "compile_s": round(entry.compile_s, 4)}
    prng_s = sum(item["compile_s"] for item in prng.values())
    first_call_s = (import_s or 0.0) + prng_s
    share = first_call_s / wall
    if share < limit["min_share"]:
        return
    first_op = next((c for c in ctx.run.cells if c.jax is not None and c.jax.compiles), None)
    yield Finding(
        rule=NAME,
        title="First-call costs dominate a small notebook",
        cell_index=None,
        severity="low",  # one-off costs; the fix is in how the notebook is timed or run, not in its code
        confidence=0.8,
        evidence={
            "notebook_wall_s": round(wall, 4),
            "first_call_s": round(first_call_s, 4),
            "share": round(share, 3),
            "import_cell": import_cell.index,
            "import_s": round(import_s, 4) if import_s is not None else "not separable: the import cell also does work",
            "prng_first_compiles": prng,
            "prng_compile_s": round(prng_s, 4),
            "backend_init": (
                "not measured separately (JAX emits no event for it): it is inside the run time of "
                + (first_op.label if first_op else "the first cell that runs a JAX operation")
            ),
            "seconds_at_stake": round(first_call_s, 4),
        },
        summary=(
            f"{share:.0%} of this {seconds(wall)} notebook is first-call cost: importing JAX"
            + (f" {seconds(import_s)}" if import_s is not None else "")
            + (f", first PRNG compiles {seconds(prng_s)}" if prng else "")
            + ", plus backend start-up (not separately measured)"
        ),
        highlights=[
            ("import", seconds(import_s) if import_s is not None else "not separable: the import cell also does work"),
            ("PRNG compiles", f"{seconds(prng_s)} ({', '.join(list(prng)[:3])})" if prng else "none"),
            ("notebook", f"{seconds(wall)}; first-call costs {share:.0%}"),
        ],
        action="warm up before timing; keep JAX_COMPILATION_CACHE_DIR between runs",
        fix=(
            "These are start-up costs, not the method's: warm up (one call) before timing"
            + (
                "; keep JAX_COMPILATION_CACHE_DIR between runs so the PRNG programs are not compiled again"
                if prng
                else ""
            )
            + "; for tiny arrays NumPy avoids them entirely."
        ),
    )


RULE = Rule(NAME, evaluate, generic=True, thresholds=THRESHOLDS)
