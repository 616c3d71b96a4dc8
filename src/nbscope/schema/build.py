"""The cell writers: how a cell's figures derive from what the collector measured, how repeats combine, and a
notebook's totals.

``wall = compile + run + overhead + collection`` is derived here only, so it means the same thing in every
producer (``collect.runner``, ``api.trace``, ``api.pathways``, ``record.live``) and every reader.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from nbscope._units import number
from nbscope.schema._fields import without_collection
from nbscope.schema.status import FAILED, FINISHED, RAN

# ---- one cell ------------------------------------------------------------------------------------


def derive(cell: dict[str, Any]) -> dict[str, Any]:
    """compile_s, run_s, overhead_s and compile_share from a cell's wall, code time and compile events.

    ``wall`` is the kernel's whole request (busy → idle), ``code`` the time inside the cell's code, and
    ``collection`` what nbscope's own collection took after the code (``--forecast``; 0 when not recorded):
    ``wall = compile + run + overhead + collection`` with ``run = code − compile`` and
    ``overhead = wall − code − collection``.
    """
    jax, numba = cell.get("jax") or {}, cell.get("numba") or {}
    wall = number(cell.get("wall_s"))
    if wall is None:
        return cell
    compile_s = sum(number(jax.get(key)) or 0.0 for key in ("trace_s", "lower_s", "backend_s"))
    compile_s += number(numba.get("compile_s")) or 0.0
    cell.update(_split(wall, number(cell.get("code_s")), compile_s, number(cell.get("collection_s")) or 0.0))
    return cell


def _split(wall: float, code: float | None, compile_s: float, collection: float = 0.0) -> dict[str, float]:
    """``wall = compile + run + overhead + collection``: the one place the parts and the compile share are
    derived. The compile share is of the notebook's own time."""
    code = wall if code is None else code
    own = without_collection(wall, collection) or 0.0
    return {
        "compile_s": compile_s,
        "run_s": max(0.0, code - compile_s),
        "overhead_s": max(0.0, own - code),
        "compile_share": min(1.0, compile_s / own) if own > 0 else 0.0,
    }


def combine_repeats(executions: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One record per cell with medians over repeats; ``samples`` keeps each repeat's figures.

    The medians are taken per quantity (wall, code, compile), then derived as for a single run, so
    ``run_s`` is ``median(code) − median(compile)`` with or without repeats.
    """
    combined = []
    for cells in zip(*executions, strict=True):
        base = dict(cells[-1])  # the last repeat's details (compiles, status) stand for the cell
        walls = [w for w in (number(c.get("wall_s")) for c in cells) if w is not None]
        codes = [w for w in (number(c.get("code_s")) for c in cells) if w is not None]
        compiles = [w for w in (number(c.get("compile_s")) for c in cells) if w is not None]
        collections = [w for w in (number(c.get("collection_s")) for c in cells) if w is not None]
        base["samples"] = {
            "wall_s": walls,
            "code_s": codes,
            "compile_s": compiles,
            "status": [c.get("status") for c in cells],
        }
        waits = [number((c.get("sched") or {}).get("wait_s")) for c in cells]
        if walls and len(waits) == len(walls) and None not in waits:
            base["samples"]["wait_s"] = waits  # each repeat's wait for a CPU, beside its wall
        if walls:
            median = statistics.median(walls)
            base["wall_s"] = median
            base["code_s"] = statistics.median(codes) if codes else None
            base["spread"] = statistics.median(abs(w - median) for w in walls) / median if median > 0 else 0.0
            if collections:
                base["collection_s"] = statistics.median(collections)
            base.update(
                _split(
                    median,
                    base["code_s"],
                    statistics.median(compiles) if compiles else 0.0,
                    base.get("collection_s") or 0.0,
                )
            )
        worst = next((c for c in cells if c.get("status") not in (*FINISHED, "skipped")), None)
        if worst is not None:
            base["status"], base["error"] = worst.get("status"), worst.get("error")
        combined.append(base)
    return combined


# ---- a notebook's cells --------------------------------------------------------------------------


def totals(cells: Sequence[Mapping[str, Any]], runner: Mapping[str, Any], cache_state: str) -> dict[str, Any]:
    """Per-notebook figures from cell records; each cell's ``jax.cache_state`` is set to the notebook's.

    The probe hears JAX say once per process whether its compile cache feature is enabled ("on" by default,
    with or without a cache folder); what a cell's compiles met is the run's cache state (``off``,
    ``cold``, ``warm``). JAX's word is kept as ``jax.cache_feature``.
    """

    def total(key: str, sub: str | None = None) -> float:
        values = [((c.get(sub) or {}).get(key) if sub else c.get(key)) for c in cells]
        return sum(v for v in (number(v) for v in values) if v is not None)

    peaks = [(c.get("rss") or {}).get("peak_bytes") for c in cells]
    hits = int(total("cache_hits", "jax"))
    if cache_state == "cold" and hits:
        cache_state = "warm"  # a cold cache that still hit: the notebook compiled the same thing twice
    for cell in cells:
        jax = cell.get("jax")
        if isinstance(jax, dict) and jax.get("cache_state") != cache_state:
            if jax.get("cache_state") is not None:
                jax["cache_feature"] = jax["cache_state"]
            jax["cache_state"] = cache_state
    return {
        "cells": len(cells),
        "cells_run": sum(1 for c in cells if c.get("status") in RAN),
        "cells_ok": sum(1 for c in cells if c.get("status") in FINISHED),
        "cells_failed": sum(1 for c in cells if c.get("status") in FAILED),
        "wall_s": total("wall_s"),
        "compile_s": total("compile_s"),
        "run_s": total("run_s"),
        "compiles": int(total("compiles", "jax")),
        "user_compiles": int(total("user_compiles", "jax")),
        "eager_compiles": int(total("eager_compiles", "jax")),
        "library_compiles": int(total("library_compiles", "jax")),
        "numba_compiles": int(total("compiles", "numba")),
        "numba_compile_s": total("compile_s", "numba"),
        "cache_state": cache_state,
        "cache_hits": hits,
        "cache_misses": int(total("cache_misses", "jax")),
        "cache_retrieval_s": total("cache_retrieval_s", "jax"),
        "kernel_start_s": runner.get("kernel_start_s"),
        "execute_s": runner.get("execute_s"),
        "peak_rss_bytes": max((p for p in peaks if isinstance(p, int) and not isinstance(p, bool)), default=None),
    }
