"""Retrace churn: one function compiled again and again, for new shapes, new static arguments, or because
the jitted function itself is created anew on every call (``jax.jit(lambda ...)`` in a loop).

A retrace is counted whatever the persistent compile cache holds: a cache hit saves only the backend compile,
the function is still traced and lowered again for each new shape, and a cold run compiles them all again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nbscope.analyse.diagnose._base import Context, Finding, FunctionStats, Outcome, Rule, seconds, severity

NAME = "retrace-churn"
MIN_COMPILES = 3  # two shapes are normal (a lecture shows a recompile on purpose); three is a pattern
MIN_RECREATED = 2  # identical shapes compiled twice or more: nothing about the input changed


def _units(ctx: Context) -> list[FunctionStats]:
    """Functions to judge. Compiles are grouped by name and, when the sources are known, by the definition
    in force at each compile (a notebook that redefines ``f`` has two functions, each compiled once).
    Lambdas are judged per cell: every lambda is called ``<lambda>``, so two different lambdas in two cells
    are not one function compiled twice."""
    units: dict[tuple[str, Any], FunctionStats] = {}
    for cell in ctx.run.cells:
        index = cell.index
        for entry in cell.jax.functions if cell.jax else ():
            name = entry.name
            if name == "<lambda>":
                key: tuple[str, Any] = (name, index)
            else:
                definition = ctx.code.function_at(name, index) if ctx.has_sources else None
                key = (name, (definition.cell, definition.line) if definition else None)
            units.setdefault(key, FunctionStats(name=name, kind=str(entry.kind))).add(index, entry)
    return list(units.values())


_STATIC_FIX = (
    "`{name}` is marked static_argnums/static_argnames: every new static value compiles again. Pass "
    "values that only change numbers as ordinary (traced) arguments, and keep static ones few."
)
_RECREATED_FIX = (
    "Create the jitted function once and reuse it: move `jax.jit(...)` out of the loop or function that "
    "calls it (e.g. `step = jax.jit(fn)` at top level, then call `step(x)`); a new `jax.jit(lambda ...)` never "
    "hits JAX's compile cache."
)


def _highlights(stats: FunctionStats, distinct: list[str] | None, static: bool) -> list[tuple[str, str]]:
    """The shapes seen (None: not fully reported), the compiles by cell, and static arguments when marked."""
    cells = sorted(stats.cells)
    highlights = [
        (
            "shapes",
            (", ".join(distinct[:6]) + (" …" if len(distinct) > 6 else ""))
            if distinct is not None
            else "not fully reported by the probe",
        ),
        (
            "compiles",
            f"{stats.count} in cell{'s' if len(cells) > 1 else ''} {', '.join(str(i + 1) for i in cells)}: "
            f"{seconds(stats.compile_s)} (backend {seconds(stats.backend_s)})"
            + (f"; {stats.cache_hits} read from the persistent cache" if stats.cache_hits else ""),
        ),
    ]
    if static:
        highlights.append(("static arguments", f"`{stats.name}` marks some arguments static; each new value compiles"))
    return highlights


def evaluate(ctx: Context) -> Iterator[Outcome]:
    for stats in _units(ctx):
        # Traces, not backend compiles: a persistent-cache hit is a retrace whose backend compile was read back.
        traces = stats.count
        if stats.kind != "user" or traces < 2:
            continue
        shapes = stats.shapes
        distinct = list(dict.fromkeys(shapes))
        # A shape cut short ("float32[3000" for float32[3000,3000]) cannot tell two 2-D shapes apart: treat the
        # shapes as unknown rather than call different shapes "the same" (the probe's shape parser truncates them).
        complete = all(shape.count("[") == shape.count("]") for shape in shapes)
        shapes_known = len(shapes) >= stats.count and bool(shapes) and complete
        repeated = traces - len(distinct) if shapes_known else 0
        function = ctx.code.functions.get(stats.name) if ctx.has_sources else None
        static = bool(function and function.static_args)
        recreated = repeated >= MIN_RECREATED or (stats.name == "<lambda>" and repeated >= 1)
        if traces < MIN_COMPILES and not recreated:
            continue
        extra_s = stats.compile_s * (traces - 1) / traces
        hits = stats.cache_hits
        cached = " (the persistent cache saved only the backend compiles)" if hits else ""
        verb = "traced" if hits else "compiled"  # with cache hits, not every trace reached the backend compiler
        if recreated:
            cause = "changing static arguments" if static else "a jitted function created anew per call"
            summary = (
                f"`{stats.name}` {verb} {traces} times"
                + (
                    f" for the same argument shapes ({distinct[0]})"
                    if len(distinct) == 1
                    else f", {repeated} of them for shapes seen before"
                )
                + f": {cause}; {seconds(extra_s)} of recompiles{cached}"
            )
            fix = _STATIC_FIX.format(name=stats.name) if static else _RECREATED_FIX
            confidence = 0.85 if shapes_known else 0.6
        else:
            cause = "new argument shapes"
            summary = (
                f"`{stats.name}` {verb} {traces} times for {len(distinct) if shapes_known else 'unreported'} "
                f"shapes: {seconds(extra_s)} of recompiles{cached}"
            )
            fix = (
                f"Give `{stats.name}` fixed shapes: pad inputs to one length (or a few bucket sizes) and mask the padding, "
                "or keep the varying size out of the jitted function; each new shape or dtype compiles a new program."
            )
            confidence = 0.9 if shapes_known else 0.7
        highlights = _highlights(stats, distinct if shapes_known else None, static)
        yield Finding(
            rule=NAME,
            title="Retrace churn",
            cell_index=stats.main_cell,
            severity=severity(extra_s, ctx.total_wall),
            confidence=confidence,
            evidence={
                **stats.evidence(),
                "distinct_shapes": distinct if shapes_known else None,
                "shapes_reported": shapes_known,
                "repeated_shapes": repeated,
                "traces": traces,
                "cause": cause,
                "static_args": static,
                "seconds_at_stake": round(extra_s, 4),
            },
            summary=summary,
            fix=fix,
            highlights=highlights,
            action=(
                f"pass changing values to `{stats.name}` as traced arguments, not static ones"
                if recreated and static
                else "create the jitted function once and reuse it"
                if recreated
                else f"give `{stats.name}` fixed shapes (pad and mask)"
            ),
        )


RULE = Rule(NAME, evaluate)
