"""Cold caches: the JAX persistent compile cache off or cold, Numba functions compiled without
``cache=True``; and what a warm cache would save, measured when a warm run is given as ``other``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence

from nbscope.analyse.diagnose._base import Advice, Context, Finding, Outcome, Rule, Skip, seconds, severity
from nbscope.schema.model import Cell

NAME = "cold-cache"
THRESHOLDS = {
    "min_backend_s": 0.5,  # backend compile seconds worth caching ...
    "min_share": 0.05,  # ... when they are at least this share of the notebook's wall time
    "min_numba_s": 0.5,  # Numba compile seconds (of functions without cache=True) worth caching
}


def _backend_s(cells: Sequence[Cell]) -> float:
    return sum(c.jax.backend_s if c.jax else 0.0 for c in cells)


def nbscope_cache(ctx: Context) -> str | None:
    """How nbscope set the persistent compile cache for this run ("--jax-cache warm"), or None when it did not:
    a fix must not ask the reader to set what the run already had."""
    setting = ctx.settings.jax_cache
    if setting == "off" or ctx.totals.cache_state in (None, "off"):
        return None
    return f"--jax-cache {setting}"


def _cache_setting(ctx: Context) -> str | None:
    """``--jax-cache`` as the run had it; None for a traced command, which sets up its own cache."""
    return None if ctx.settings.pathway == "trace" else ctx.settings.jax_cache


def _jax(ctx: Context) -> Iterator[Outcome]:
    limit = ctx.limits(NAME, THRESHOLDS)
    state = ctx.totals.cache_state
    backend = _backend_s(ctx.run.cells)
    wall = ctx.total_wall
    if (
        state not in ("off", "cold")
        or backend < limit["min_backend_s"]
        or (wall and backend / wall < limit["min_share"])
    ):
        return
    evidence: dict[str, object] = {
        "cache_state": state,
        "jax_cache_setting": _cache_setting(ctx),
        "backend_compile_s": round(backend, 4),
        "compile_s": ctx.totals.compile_s,
        "compiles": ctx.totals.compiles,
        "cache_hits": ctx.totals.cache_hits,
    }
    other, warm = ctx.other, ctx.other_run
    if (
        other is not None
        and warm is not None
        and other.target == ctx.record.target
        and warm.totals.cache_state == "warm"
    ):
        other_backend = _backend_s(warm.cells)
        saved = backend - other_backend
        saving_s, saving_is, at_stake = round(saved, 4), "measured: this run minus the warm run", max(saved, 0.0)
        evidence.update(
            warm_run=other.run_id,
            warm_backend_compile_s=round(other_backend, 4),
            warm_cache_hits=warm.totals.cache_hits,
        )
        saving = f"the warm run {other.run_id or ''} measured {seconds(saved)} less backend compile"
        confidence = 0.95
    else:
        saving_s, at_stake = round(backend, 4), backend
        saving_is = (
            "upper bound: the backend compile seconds measured here (a hit still costs a retrieval; tracing "
            "and lowering remain)"
        )
        saving = f"a warm cache would save up to {seconds(backend)} of backend compile"
        confidence = 0.8
    evidence.update(saving_s=saving_s, saving_is=saving_is, seconds_at_stake=round(at_stake, 4))
    yield Finding(
        rule=NAME,
        title="JAX persistent compile cache " + ("off" if state == "off" else "cold"),
        cell_index=None,
        severity=severity(round(at_stake, 4), wall),
        confidence=confidence,
        evidence=evidence,
        summary=f"{ctx.totals.compiles} compiles with the persistent cache {state}: {saving}",
        highlights=[
            (
                "backend compile",
                f"{seconds(backend)} of {seconds(wall)} ({backend / wall:.0%})" if wall else seconds(backend),
            ),
            ("saving", f"{seconds(saving_s)}, {saving_is.split(':')[0]}"),
        ],
        **_advice(ctx, state),
    )


def _advice(ctx: Context, state: str) -> Advice:
    """The fix and its one-line form. When nbscope set the cache for this run (``--jax-cache``), the run already had
    JAX_COMPILATION_CACHE_DIR: it started empty and is now filled, so the fix says what is left to do."""
    used = nbscope_cache(ctx)
    if used is not None and state == "cold":
        warm = "--jax-cache warm" if used in ("--jax-cache cold", "--jax-cache warm") else used
        return {
            "action": f"run again with `{warm}`: this run filled the cache",
            "fix": (
                f"This run had the persistent cache on ({used}) and it started empty, so every program was compiled "
                f"and written to it; `nbscope profile {warm}` runs read them back and measure the gain. Where the "
                "notebook runs without nbscope (a book build, CI), set JAX_COMPILATION_CACHE_DIR there, to a folder "
                "kept between runs (in CI, restore it with actions/cache), with JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 "
                "and JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1 as nbscope does."
            ),
        }
    return {
        "action": "set JAX_COMPILATION_CACHE_DIR to a folder kept between runs",
        "fix": (
            "Set JAX_COMPILATION_CACHE_DIR to a folder kept between runs (in CI, restore it with actions/cache), with "
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 and JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1 so small "
            "compiles are cached too; `nbscope profile --jax-cache warm` measures the gain."
        ),
    }


def _where_defined(ctx: Context, names: list[str], compiled_in: Mapping[str, list[int]]) -> dict[str, str]:
    """Per function: the decorators in force where it compiled (a lecture may define a function twice)."""
    where: dict[str, str] = {}
    for n in names:
        found = [ctx.code.numba_function_at(n, i) for i in compiled_in[n]] if ctx.has_sources else []
        places = list(dict.fromkeys((d.cell, d.line) for d in found if d))
        if places:
            where[n] = "; ".join(f"cell {c + 1}, line {line}" for c, line in places)
    return where


def _numba_compiles(
    ctx: Context,
) -> tuple[dict[str, float], dict[str, str | None], dict[str, bool | None], dict[str, list[int]]]:
    """Per Numba function: its compile seconds, its module, whether it caches and the cells it compiled in."""
    compiled: dict[str, float] = defaultdict(float)
    modules: dict[str, str | None] = {}
    caches: dict[str, bool | None] = {}
    compiled_in: dict[str, list[int]] = {}
    for cell in ctx.run.cells:
        for entry in cell.numba.functions if cell.numba else ():
            name = entry.name
            compiled[name] += entry.seconds
            modules.setdefault(name, entry.module)
            caches.setdefault(name, entry.cache)
            compiled_in.setdefault(name, []).append(cell.index)
    return compiled, modules, caches, compiled_in


def _numba(ctx: Context) -> Iterator[Outcome]:
    min_numba_s = ctx.limits(NAME, THRESHOLDS)["min_numba_s"]
    numba_s = ctx.numba_compile_s
    if numba_s < min_numba_s:
        return
    compiled, modules, caches, compiled_in = _numba_compiles(ctx)
    recorded = all(modules[n] is not None and caches[n] is not None for n in compiled)
    if not ctx.has_sources and not recorded:
        yield Skip(
            NAME,
            f"Numba compiled for {seconds(numba_s)}; whether its functions use cache=True needs the cell "
            f"sources ({ctx.missing_sources()}); the probe does not record Numba cache hits",
        )
        return
    notebook = ctx.code.numba_functions if ctx.has_sources else {}

    def own(name: str) -> bool:  # the notebook's code: its __module__ is __main__ (older records: in the source)
        return modules[name] == "__main__" or (modules[name] is None and name in notebook)

    def caches_to_disk(name: str) -> bool:
        defined = ctx.code.numba_function_at(name) if ctx.has_sources else None
        return caches[name] is True or (caches[name] is None and defined is not None and defined.cache)

    uncached = {n: s for n, s in compiled.items() if own(n) and not caches_to_disk(n)}
    cached = {n: s for n, s in compiled.items() if own(n) and caches_to_disk(n)}
    library = {n: s for n, s in compiled.items() if not own(n)}
    at_stake = sum(uncached.values())
    if at_stake < min_numba_s:
        return
    names = sorted(uncached, key=lambda n: -uncached[n])
    where = _where_defined(ctx, names, compiled_in)
    listed = ", ".join(f"`{n}`" + (f" ({where[n]})" if n in where else "") for n in names[:3])
    yield Finding(
        rule=NAME,
        title="Numba cache off",
        cell_index=None,
        severity=severity(at_stake, ctx.total_wall),
        confidence=0.85,  # from the decorators; Numba's own cache hits are not recorded by the probe
        evidence={
            "numba_compile_s": round(numba_s, 4),
            "uncached_functions": {n: round(uncached[n], 4) for n in names},
            "cached_functions_compiled_anyway": {n: round(s, 4) for n, s in cached.items()} or None,
            "library_functions": {n: round(s, 4) for n, s in library.items()} or None,
            "cache_hits": "not recorded by the probe",
            "seconds_at_stake": round(at_stake, 4),
        },
        summary=(
            f"Numba compiled {len(uncached)} notebook function(s) without cache=True: {seconds(at_stake)} "
            f"({', '.join(names[:3])}) recompiled in every run"
        ),
        fix=(
            f"Add `cache=True` to the Numba decorators of {listed} (`@numba.jit(cache=True)`, also with parallel=True) "
            "so later runs load the compiled code from __pycache__ (keep that folder in CI)."
        ),
        highlights=[
            (
                "compile",
                ", ".join(f"`{n}` {seconds(uncached[n])}" for n in names[:4]) + (" …" if len(names) > 4 else ""),
            ),
            *(
                [
                    (
                        "library",
                        f"{seconds(sum(library.values()))} compiling package functions (not counted: not yours "
                        "to decorate)",
                    )
                ]
                if library
                else []
            ),
        ],
        action=f"add `cache=True` to the decorators of {', '.join(f'`{n}`' for n in names[:3])}",
    )


def evaluate(ctx: Context) -> Iterator[Outcome]:
    yield from _jax(ctx)
    yield from _numba(ctx)


RULE = Rule(NAME, evaluate, generic=True, thresholds=THRESHOLDS)
