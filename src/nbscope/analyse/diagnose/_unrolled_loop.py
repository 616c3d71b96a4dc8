"""Python loop unrolled inside jit: tracing repeats the body per iteration, so compile time grows with
the loop length (facts: ~1.5 s for 50 steps, ~10 s for 400 on a 2-core CPU).

The loop's length is the one this run used (a literal, the default the ``def`` bound, the static argument
of the call, the global when the function was traced: see ``_bindings``), or "unknown"; the proposed code
keeps the bounds as written (``fori_loop(0, n, ...)``), never a number nbscope inferred.

Needs both kinds of evidence: the loop in the source of a jitted function (or a notebook function it
calls), and a large measured compile for that function. Either alone is not enough: small loops over a
few layers are fine, and a slow compile has other causes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from nbscope.analyse.diagnose._base import Context, Finding, FunctionStats, Outcome, Rule, Skip, seconds, severity
from nbscope.analyse.diagnose._bindings import LoopLength, LoopResolver
from nbscope.analyse.diagnose._source import SourceLoop

if TYPE_CHECKING:
    from nbscope.schema.model import Cell

NAME = "unrolled-loop"
THRESHOLDS = {
    "min_compile_s": 0.5,  # one compile of the function at least this long ...
    "min_compile_s_long_loop": 0.2,  # ... or this long with a loop of at least long_loop literal steps
    "long_loop": 50,
}


def _steps(length: LoopLength) -> str:
    """ "20 steps", "10–300 steps" or "an unknown number of steps"."""
    if length.trips is not None:
        return f"{length.trips} steps"
    if length.values:
        return f"{length.values[0]}–{length.values[-1]} steps"
    return "an unknown number of steps"


def _longest(length: LoopLength) -> int | None:
    return length.trips if length.trips is not None else (max(length.values) if length.values else None)


def _replacement(loop: SourceLoop, length: LoopLength) -> str:
    """The code that replaces the loop, with its bounds as written in the function (valid there whatever
    their value), never a number nbscope inferred."""
    if loop.kind == "while":
        return "`jax.lax.while_loop(cond, body, init)`"
    if length.stop is None:
        return f"`jax.lax.scan(body, init, {loop.iterates})`"
    if length.step is not None:
        return f"`jax.lax.fori_loop(0, len({loop.iterates}), body, init)`"
    return f"`jax.lax.fori_loop({length.start}, {length.stop}, body, init)`"


def _evidence(
    stats: FunctionStats,
    per_compile: float,
    loop: SourceLoop,
    length: LoopLength,
    lengths: list[tuple[SourceLoop, LoopLength]],
    defined_in: int,
    where: Cell | None,
) -> dict[str, object]:
    """The finding's evidence: the function's compiles, the loop unrolled (its steps and where it is written) and
    every loop of the function."""
    evidence = {
        **stats.evidence(),
        "per_compile_s": round(per_compile, 4),
        "loop": {
            "kind": loop.kind,
            "iterates": loop.iterates,
            "trips": length.trips,
            "lengths_seen": length.values,
            "trips_from": length.origin,
            "in_function": loop.function,
            "defined_in_cell": defined_in,
            "line_in_cell": loop.line,
            "cell_line": where.line if where else None,  # the cell's fence in a MyST file
        },
        "all_loops": [
            {
                "kind": item.kind,
                "iterates": item.iterates,
                "trips": found.trips,
                "lengths_seen": found.values,
                "function": item.function,
            }
            for item, found in lengths
        ],
        "seconds_at_stake": round(stats.compile_s, 4),
    }
    if length.trips:
        evidence["compile_ms_per_step"] = round(per_compile / length.trips * 1e3, 3)
    return evidence


def evaluate(ctx: Context) -> Iterator[Outcome]:
    limit = ctx.limits(NAME, THRESHOLDS)
    min_compile_s, long_loop = limit["min_compile_s"], limit["long_loop"]
    candidates = [s for s in ctx.functions.values() if s.kind == "user" and s.compiles > 0]
    if not candidates:
        return
    if not ctx.has_sources:
        slow = [s.name for s in candidates if s.compile_s / max(1, s.count) >= min_compile_s]
        if slow:
            yield Skip(
                NAME, f"needs the cell sources to look for Python loops in {', '.join(slow)}: {ctx.missing_sources()}"
            )
        return
    for stats in candidates:
        at = stats.main_cell
        loops = ctx.code.loops_in(stats.name, at)
        function = ctx.code.function_at(stats.name, at)
        if not loops or function is None:
            continue
        per_compile = stats.compile_s / max(1, stats.count)
        resolver = LoopResolver(ctx.bindings, ctx.code, function, stats.cells)
        lengths = [(item, resolver.length(item)) for item in loops]
        known = [n for _, length in lengths if (n := _longest(length)) is not None]
        longest = max(known) if known else None
        long_enough = longest is not None and longest >= long_loop
        if not (per_compile >= min_compile_s or (long_enough and per_compile >= limit["min_compile_s_long_loop"])):
            continue
        loop, length = max(lengths, key=lambda pair: (_longest(pair[1]) or 0, pair[0].kind == "for"))
        written_in = ctx.code.function_at(loop.function, function.cell) or function
        where = ctx.run.cell(written_in.cell)
        cell_index = at if at is not None else function.cell
        count = max(1, stats.count)
        if long_enough and per_compile >= min_compile_s:
            confidence = 0.9
        elif longest is None:
            confidence = 0.75  # a loop whose length we cannot read: it may be short
        else:
            confidence = 0.7
        place = f"line {loop.line} of cell {written_in.cell + 1}"
        evidence = _evidence(stats, per_compile, loop, length, lengths, written_in.cell, where)
        replacement = _replacement(loop, length)
        header = (
            f"for {ast.unparse(loop.node.target)} in {loop.iterates}"
            if isinstance(loop.node, ast.For)
            else f"while {loop.iterates}"
        )
        yield Finding(
            rule=NAME,
            title="Python loop unrolled inside jit",
            cell_index=cell_index,
            severity=severity(stats.compile_s, ctx.total_wall),
            confidence=confidence,
            evidence=evidence,
            summary=(
                f"`{stats.name}` unrolls a Python `{loop.kind}` loop of {_steps(length)} into its XLA program: "
                f"{seconds(per_compile)} per compile" + (f", {stats.count} compiles" if stats.count > 1 else "")
            ),
            fix=(
                f"Replace the Python loop over `{loop.iterates}` in `{loop.function}` ({place}) with {replacement}"
                + (" (or `jax.lax.scan` when each step's output is kept)" if loop.kind == "for" and length.stop else "")
                + ": the body is then compiled once and compile time no longer grows with the number of steps."
            ),
            highlights=[
                ("loop", f"`{header}` in `{loop.function}`, {place}"),
                (
                    "steps",
                    f"{_steps(length)}: {length.origin}"
                    if length.origin != "a literal"
                    else f"{_steps(length)} (literal)",
                ),
                (
                    "compile",
                    f"{seconds(per_compile)} per compile × {stats.count} (trace {seconds(stats.trace_s / count)}, "
                    f"lower {seconds(stats.lower_s / count)}, backend {seconds(stats.backend_s / count)})",
                ),
            ],
            action=f"use {replacement} for the loop over `{loop.iterates}` in `{loop.function}`",
        )


RULE = Rule(NAME, evaluate, thresholds=THRESHOLDS)
