"""Compile-bound cell: most of a cell's wall time is JAX or Numba compilation, not computation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nbscope.analyse.diagnose._base import Context, Finding, Outcome, Rule, cell_label, seconds, severity

NAME = "compile-bound"
THRESHOLDS = {
    "min_compile_s": 0.5,  # a cell's compile seconds below this are not worth a finding, whatever their share
    "min_share": 0.5,  # share of the cell's wall time spent compiling
    "notebook_min_s": 2.0,  # a notebook's compile seconds (spread over cells) worth a finding ...
    "notebook_share": 0.4,  # ... when they are at least this share of its wall time
}


def _contributors(cell: dict[str, Any]) -> list[dict[str, Any]]:
    """The compiles inside a cell, largest first: JAX functions and outermost Numba compiles."""
    items = []
    for entry in (cell.get("jax") or {}).get("functions") or []:
        spent = sum(float(entry.get(k) or 0.0) for k in ("trace_s", "lower_s", "backend_s"))
        items.append({"name": entry.get("name"), "kind": f"jax {entry.get('kind')}", "seconds": round(spent, 4),
                      "compiles": int(entry.get("count") or 0) - int(entry.get("cache_hits") or 0)})
    for entry in (cell.get("numba") or {}).get("functions") or []:
        items.append({"name": entry.get("name"), "kind": "numba", "seconds": round(float(entry.get("seconds") or 0.0), 4),
                      "compiles": 1, "signature": entry.get("signature")})
    return sorted(items, key=lambda item: item["seconds"], reverse=True)


def _fix(top: dict[str, Any] | None) -> str:
    if top is None:
        return "Keep compiles out of the measured work: warm up once, then time a second call."
    if top["kind"] == "numba":
        return (
            f"Numba compiles `{top['name']}` on its first call: add `cache=True` to its decorator so later runs load "
            "the machine code from __pycache__, and time a second call to measure the work itself."
        )
    if top["kind"] == "jax eager":
        return (
            f"JAX compiles each eager operation (here `{top['name']}`) the first time it meets a shape and dtype: a "
            "one-off cost that a persistent compile cache (JAX_COMPILATION_CACHE_DIR) removes in later runs; inside "
            "loops, put the whole step in one jitted function."
        )
    return (
        f"`{top['name']}` is compiled here: call it with fixed shapes and dtypes so this compile happens once, and "
        "persist compiled programs across runs with JAX_COMPILATION_CACHE_DIR (`nbscope profile --jax-cache warm` "
        "measures the gain); if it is large, see the unrolled-loop and retrace findings for this function."
    )


def evaluate(ctx: Context) -> Iterator[Outcome]:
    limit = ctx.limits(NAME, THRESHOLDS)
    flagged = 0.0
    for cell in ctx.cells:
        wall, compile_s = cell.get("wall_s"), cell.get("compile_s")
        if not isinstance(wall, (int, float)) or not isinstance(compile_s, (int, float)) or wall <= 0:
            continue
        share = compile_s / wall
        if compile_s < limit["min_compile_s"] or share < limit["min_share"]:
            continue
        flagged += compile_s
        contributors = _contributors(cell)
        top = contributors[0] if contributors else None
        yield Finding(
            rule=NAME,
            title="Compile-bound cell",
            cell_index=cell["index"],
            severity=severity(compile_s, ctx.total_wall),
            confidence=0.95,  # compile seconds are measured by JAX's and Numba's own events
            evidence={
                "wall_s": round(wall, 4),
                "compile_s": round(compile_s, 4),
                "run_s": cell.get("run_s"),
                "compile_share": round(share, 3),
                "jax_compiles": (cell.get("jax") or {}).get("compiles"),
                "numba_compiles": (cell.get("numba") or {}).get("compiles"),
                "compiled": contributors[:6],
                "seconds_at_stake": round(compile_s, 4),
            },
            summary=(
                f"{cell_label(cell)} spends {seconds(compile_s)} of {seconds(wall)} ({share:.0%}) compiling"
                + (f", mostly `{top['name']}` ({top['kind']}, {seconds(top['seconds'])})" if top else "")
            ),
            fix=_fix(top),
        )
    total_compile = ctx.totals.get("compile_s")
    wall = ctx.total_wall
    if isinstance(total_compile, (int, float)) and wall > 0:
        share = total_compile / wall
        # A notebook whose compiles are spread thin over many cells: no single cell was flagged for most of it.
        if total_compile >= limit["notebook_min_s"] and share >= limit["notebook_share"] and flagged < 0.5 * total_compile:
            yield Finding(
                rule=NAME,
                title="Compile-bound notebook",
                cell_index=None,
                severity=severity(total_compile - flagged, wall),
                confidence=0.9,
                evidence={
                    "wall_s": round(wall, 4),
                    "compile_s": round(total_compile, 4),
                    "compile_share": round(share, 3),
                    "compiles": ctx.totals.get("compiles"),
                    "numba_compiles": ctx.totals.get("numba_compiles"),
                    "seconds_at_stake": round(total_compile - flagged, 4),
                },
                summary=f"the notebook spends {seconds(total_compile)} of {seconds(wall)} ({share:.0%}) compiling, spread over many cells",
                fix=(
                    "Persist compiled programs across runs (JAX_COMPILATION_CACHE_DIR with "
                    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0; Numba `cache=True`), and fuse small eager steps into "
                    "fewer jitted functions."
                ),
            )


RULE = Rule(NAME, "Compile-bound cell", "per-cell compile_s and wall_s (JAX and Numba compile events)", evaluate, generic=True,
            thresholds=THRESHOLDS)
