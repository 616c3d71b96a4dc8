"""Python loop unrolled inside jit: tracing repeats the body per iteration, so compile time grows with
the loop length (facts: ~1.5 s for 50 steps, ~10 s for 400 on a 2-core CPU).

Needs both kinds of evidence: the loop in the source of a jitted function (or a notebook function it
calls), and a large measured compile for that function. Either alone is not enough: small loops over a
few layers are fine, and a slow compile has other causes.
"""

from __future__ import annotations

from collections.abc import Iterator

from nbscope.analyse.diagnose._base import Context, Finding, Outcome, Rule, Skip, seconds, severity

NAME = "unrolled-loop"
THRESHOLDS = {
    "min_compile_s": 0.5,  # one compile of the function at least this long ...
    "min_compile_s_long_loop": 0.2,  # ... or this long with a loop of at least long_loop literal steps
    "long_loop": 50,
}


def evaluate(ctx: Context) -> Iterator[Outcome]:
    limit = ctx.limits(NAME, THRESHOLDS)
    min_compile_s, long_loop = limit["min_compile_s"], limit["long_loop"]
    candidates = [s for s in ctx.functions.values() if s.kind == "user" and s.compiles > 0]
    if not candidates:
        return
    if not ctx.has_sources:
        slow = [s.name for s in candidates if s.compile_s / max(1, s.count) >= min_compile_s]
        if slow:
            yield Skip(NAME, f"needs the cell sources to look for Python loops in {', '.join(slow)}: {ctx.missing_sources()}")
        return
    for stats in candidates:
        at = stats.main_cell
        loops = ctx.code.loops_in(stats.name, at)
        function = ctx.code.function_at(stats.name, at)
        if not loops or function is None:
            continue
        per_compile = stats.compile_s / max(1, stats.count)
        trips = [loop.trips for loop in loops if loop.trips is not None]
        longest = max(trips) if trips else None
        long_enough = longest is not None and longest >= long_loop
        if not (per_compile >= min_compile_s or (long_enough and per_compile >= limit["min_compile_s_long_loop"])):
            continue
        loop = max(loops, key=lambda item: item.trips or 0)
        where = ctx.cell(function.cell)
        cell_index = at if at is not None else function.cell
        count = max(1, stats.count)
        if long_enough and per_compile >= min_compile_s:
            confidence = 0.9
        elif longest is None:
            confidence = 0.75  # a loop whose length we cannot read: it may be short
        else:
            confidence = 0.7
        primitive = "lax.while_loop" if loop.kind == "while" else "lax.fori_loop"
        steps = f" of {loop.trips} steps" if loop.trips else ""
        evidence = {
            **stats.evidence(),
            "per_compile_s": round(per_compile, 4),
            "loop": {
                "kind": loop.kind,
                "iterates": loop.iterates,
                "trips": loop.trips,
                "in_function": loop.function,
                "defined_in_cell": function.cell,
                "line_in_cell": loop.line,
                "notebook_line": (where or {}).get("line") + loop.line - 1 if (where or {}).get("line") else None,
            },
            "all_loops": [{"kind": item.kind, "iterates": item.iterates, "trips": item.trips, "function": item.function}
                          for item in loops],
            "seconds_at_stake": round(stats.compile_s, 4),
        }
        if loop.trips:
            evidence["compile_ms_per_step"] = round(per_compile / loop.trips * 1e3, 3)
        yield Finding(
            rule=NAME,
            title="Python loop unrolled inside jit",
            cell_index=cell_index,
            severity=severity(stats.compile_s, ctx.total_wall),
            confidence=confidence,
            evidence=evidence,
            summary=(
                f"`{stats.name}` unrolls a Python `{loop.kind}` loop{steps} into its XLA program: "
                f"{seconds(per_compile)} per compile (trace {seconds(stats.trace_s / count)}, lower "
                f"{seconds(stats.lower_s / count)}, backend {seconds(stats.backend_s / count)})"
                + (f", {stats.count} compiles" if stats.count > 1 else "")
            ),
            fix=(
                f"Replace the Python loop over `{loop.iterates}` in `{loop.function}` (line {loop.line} of cell "
                f"{function.cell + 1}) with "
                + (f"`jax.{primitive}(0, {loop.trips}, body, init)`" if loop.kind == "for" and loop.trips else f"`jax.{primitive}`")
                + (" (or `jax.lax.scan` when each step's output is kept)" if loop.kind == "for" else "")
                + ": the body is then compiled once and compile time no longer grows with the number of steps."
            ),
        )


RULE = Rule(NAME, "Python loop unrolled inside jit", "cell sources (loops in jitted functions) and per-function compile seconds",
            evaluate, thresholds=THRESHOLDS)
