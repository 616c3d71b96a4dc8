"""XLA slow-compile alarm: XLA itself warned that a compile (or constant folding) took very long."""

from __future__ import annotations

from collections.abc import Iterator

from nbscope._redact import shorten
from nbscope.analyse.diagnose._base import Context, Finding, Outcome, Rule, seconds, severity

NAME = "slow-compile-alarm"


def evaluate(ctx: Context) -> Iterator[Outcome]:
    for cell in ctx.run.cells:
        alarms = [str(a) for a in cell.alarms]
        if not alarms:
            continue
        compile_s = cell.compile_s or 0.0
        folding = any("Constant folding" in a for a in alarms)
        functions = sorted(cell.jax.functions if cell.jax else (), key=lambda f: f.compile_s, reverse=True)
        top = functions[0].name if functions else None
        yield Finding(
            rule=NAME,
            title="XLA slow-compile alarm",
            cell_index=cell.index,
            # XLA only alarms after seconds of work: never less than medium.
            severity=severity(compile_s or cell.wall_s or 0.0, ctx.total_wall, floor="medium"),
            confidence=1.0,  # XLA printed it
            evidence={
                "alarms": alarms[:5],
                "alarm_count": len(alarms),
                "compile_s": round(compile_s, 4),
                "wall_s": cell.wall_s,
                "largest_compile": top,
                "seconds_at_stake": round(compile_s, 4),
            },
            summary=(
                "XLA warned: "
                + ("constant folding took too long" if folding else "very slow compile")
                + (
                    f" ({seconds(compile_s)} compiling, mostly `{top}`)"
                    if top
                    else f" ({seconds(compile_s)} compiling)"
                )
            ),
            highlights=[("alarm", shorten(alarms[0], 120)), ("alarms", f"{len(alarms)} in this cell")],
            action=(
                "pass large arrays as arguments instead of building them inside the jitted function"
                if folding
                else "replace Python loops inside jit with lax.fori_loop / lax.scan"
            ),
            fix=(
                "Constant folding runs on arrays built from constants inside jit: pass large arrays as arguments "
                "instead of creating them (jnp.arange/ones of a literal size) inside the jitted function."
                if folding
                else "Shrink the program XLA compiles: replace Python loops inside jit with lax.fori_loop / lax.scan, "
                "avoid huge unrolled graphs and constants captured from closures (pass them as arguments)."
            ),
        )


RULE = Rule(NAME, evaluate)
