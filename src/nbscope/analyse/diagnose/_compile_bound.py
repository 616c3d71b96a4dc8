"""Compile-bound cell: most of a cell's wall time is JAX or Numba compilation, not computation.

The fix is addressed to code the reader owns: ``cache=True`` on the notebook's own Numba functions; for a
function inside an installed package, the notebook line that calls it and what can be done from there.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated

from nbscope.analyse.diagnose._base import Advice, Context, Finding, Outcome, Rule, seconds, severity
from nbscope.analyse.diagnose._cold_cache import nbscope_cache
from nbscope.analyse.diagnose._source import NumbaDefinition
from nbscope.schema.codec import Write, encode
from nbscope.schema.model import Cell

NAME = "compile-bound"
THRESHOLDS = {
    "min_compile_s": 0.5,  # a cell's compile seconds below this are not worth a finding, whatever their share
    "min_share": 0.5,  # share of the cell's wall time spent compiling
    "notebook_min_s": 2.0,  # a notebook's compile seconds (spread over cells) worth a finding ...
    "notebook_share": 0.4,  # ... when they are at least this share of its wall time
}


def _jax(owner: object) -> bool:
    """A JAX function's compile: its evidence has no Numba signature, module or cache."""
    return isinstance(owner, Compiled) and owner.kind != "numba"


@dataclass(frozen=True, slots=True)
class Compiled:
    """One function compiled in a cell, as the finding's evidence lists it."""

    name: str
    kind: str  # jax user, jax eager, jax library, numba
    seconds: float
    compiles: int
    signature: Annotated[str | None, Write(omit=_jax)] = None
    module: Annotated[str | None, Write(omit=_jax)] = None  # a Numba function's __module__ (None: not recorded)
    cache: Annotated[bool | None, Write(omit=_jax)] = None  # whether it caches to disk (None: not recorded)


def _contributors(cell: Cell) -> list[Compiled]:
    """The compiles inside a cell, largest first: JAX functions and outermost Numba compiles."""
    items = []
    for entry in cell.jax.functions if cell.jax else ():
        items.append(Compiled(entry.name, f"jax {entry.kind}", round(entry.compile_s, 4), entry.compiles))
    for numba in cell.numba.functions if cell.numba else ():
        items.append(
            Compiled(numba.name, "numba", round(numba.seconds, 4), 1, numba.signature, numba.module, numba.cache)
        )
    return sorted(items, key=lambda item: item.seconds, reverse=True)


def _owner(ctx: Context, top: Compiled, cell: Cell) -> tuple[str, NumbaDefinition | None]:
    """Whose code a Numba function compiled in ``cell`` is: ("notebook", its definition in force there, or None
    when the decorator is not found), ("package", None), or ("unknown", None) for an older record without
    sources."""
    module = top.module
    name = top.name.split(".")[-1]
    definition = ctx.code.numba_function_at(name, cell.index) if ctx.has_sources else None
    if module == "__main__" or (module is None and definition is not None):
        return "notebook", definition
    if module is not None or ctx.has_sources:
        return "package", None
    return "unknown", None


def _caller(ctx: Context, cell: Cell, package: str | None) -> str:
    """ "line 2 of cell 3 (`P = nt.decay_matrix(200)`)", or "cell 3" when its source does not show the call."""
    call = ctx.call_into(cell.index, package) if package else None
    if call is None:
        return cell.label
    return f"line {call.line} of cell {cell.index + 1} (`{call.code}`)"


def _library_numba_fix(ctx: Context, cell: Cell, top: Compiled) -> tuple[str, str]:
    package = top.module.split(".")[0] if top.module else None
    origin = f"`{package}`" if package else "a package (the run did not record which)"
    caller = _caller(ctx, cell, package)
    lead = f"`{top.name}` is in {origin}, not in this notebook; Numba compiles it when {caller} first calls it. "
    if top.cache is True:
        return (
            lead + "It caches to disk, but its cache was empty or not writable here: set NUMBA_CACHE_DIR to a folder "
            "that persists (in CI, restore it with actions/cache) and the next run loads the compiled code.",
            "set NUMBA_CACHE_DIR to a folder kept between runs (the library caches its Numba code)",
        )
    return (
        lead + "Make that call once, with the argument types of the real work, before anything you time (the compile "
        "is then paid once per kernel); "
        + (
            "if the package caches (`cache=True`), NUMBA_CACHE_DIR on a persisted folder keeps it across runs."
            if top.cache is None
            else "it does not cache, so each new kernel compiles it again."
        ),
        f"warm up: make the call at {caller.split(' (')[0]} once before timing (`{top.name}` is in {origin})",
    )


def _persist(ctx: Context) -> tuple[str, str]:
    """How to keep compiled programs between runs, as (a clause of the fix, its one-line form). When nbscope set
    the cache for this run, the run already had JAX_COMPILATION_CACHE_DIR: the clause says what it did instead."""
    used = nbscope_cache(ctx)
    if used is None:
        return (
            "keep compiled programs between runs with JAX_COMPILATION_CACHE_DIR (`nbscope profile --jax-cache warm` "
            "measures the gain)",
            "set JAX_COMPILATION_CACHE_DIR",
        )
    if ctx.totals.cache_state == "cold":
        return (
            f"this run's persistent cache ({used}) started empty and now holds these programs: a run with "
            "`--jax-cache warm` reads them back (where the notebook runs without nbscope, set "
            "JAX_COMPILATION_CACHE_DIR there)",
            "run again with `--jax-cache warm`",
        )
    return (
        f"the persistent cache ({used}) was warm, so what is left here is tracing, lowering and programs it "
        "did not hold",
        "keep shapes fixed",
    )


def _fix(ctx: Context, cell: Cell, top: Compiled | None) -> tuple[str, str]:
    """The fix and its one-line form, addressed to code the reader owns."""
    if top is None:
        return "Keep compiles out of the measured work: warm up once, then time a second call.", "warm up before timing"
    if top.kind == "numba":
        owner, own = _owner(ctx, top, cell)
        if owner == "package":
            return _library_numba_fix(ctx, cell, top)
        if owner == "unknown":
            return (
                f"Numba compiles `{top.name}` on its first call: if the notebook defines it, add `cache=True` to its "
                "decorator; if it comes from a package, call it once before anything you time (the sources were not "
                "available to tell which).",
                "cache it (`cache=True`) if it is yours; else warm it up before timing",
            )
        where = f"cell {own.cell + 1}, line {own.line}" if own else "where it is jitted"
        if own and own.cache:
            return (
                f"`{top.name}` has `cache=True` ({where}) but was compiled: its cache was empty or not writable; "
                "keep __pycache__ (or NUMBA_CACHE_DIR) between runs, e.g. with actions/cache in CI.",
                "keep Numba's cache folder between runs",
            )
        return (
            f"Numba compiles `{top.name}` on its first call: add `cache=True` to its decorator ({where}) so later "
            "runs load the machine code from __pycache__, and time a second call to measure the work itself.",
            f"add `cache=True` to the decorator of `{top.name}` ({where})",
        )
    persist, persist_short = _persist(ctx)
    if top.kind == "jax eager":
        return (
            f"JAX compiles each eager operation (here `{top.name}`) the first time it meets a shape and dtype: a "
            f"one-off cost; {persist}; inside loops, put the whole step in one jitted function.",
            f"{persist_short}; jit loops of eager operations as one function",
        )
    if top.kind == "jax library":
        on_gpu = ctx.backend.platform == "gpu"
        call = ctx.call_into(cell.index, None)
        caller = (
            f"line {call.line} of cell {cell.index + 1} (`{call.code}`, into `{call.package}`)" if call else cell.label
        )
        return (
            f"`{top.name}` comes from a library, not this notebook, and is compiled when {caller} calls it: call it "
            f"with the same shapes and dtypes each time so it compiles once; {persist}"
            + (
                "; if it is faster on the CPU, call it under `with jax.default_device(jax.devices('cpu')[0]):`."
                if on_gpu
                else "."
            ),
            "keep its argument shapes fixed"
            if persist_short == "keep shapes fixed"
            else f"{persist_short} and keep its argument shapes fixed",
        )
    return (
        f"`{top.name}` is compiled here: keep its argument shapes and dtypes fixed so it compiles once; {persist}.",
        f"keep the shapes of `{top.name}` fixed"
        if persist_short == "keep shapes fixed"
        else f"{persist_short}; keep the shapes of `{top.name}` fixed",
    )


def _compiled_text(contributors: list[Compiled]) -> str:
    shown = [f"`{c.name}` ({c.kind}) {seconds(c.seconds)}" for c in contributors[:3]]
    return ", ".join(shown) + (f", {len(contributors) - 3} more" if len(contributors) > 3 else "")


def evaluate(ctx: Context) -> Iterator[Outcome]:
    limit = ctx.limits(NAME, THRESHOLDS)
    flagged = 0.0
    for cell in ctx.run.cells:
        wall, compile_s = cell.notebook_wall_s, cell.compile_s  # nbscope's own collection left out
        if wall is None or compile_s is None or wall <= 0:
            continue
        share = compile_s / wall
        if compile_s < limit["min_compile_s"] or share < limit["min_share"]:
            continue
        flagged += compile_s
        contributors = _contributors(cell)
        top = contributors[0] if contributors else None
        fix, action = _fix(ctx, cell, top)
        highlights = [("compile", f"{seconds(compile_s)} of {seconds(wall)} ({share:.0%}); run {seconds(cell.run_s)}")]
        if contributors:
            highlights.append(("compiled", _compiled_text(contributors)))
        if top is not None and top.kind == "numba" and _owner(ctx, top, cell)[0] == "package":
            # An unrecorded cache makes the whole line "not recorded": kept as the rule has always written it
            highlights.append(
                (
                    "library",
                    f"`{top.name}` from {top.module or 'a package'}; cache " + ("on" if top.cache else "off")
                    if top.cache is not None
                    else "not recorded",
                )
            )
        yield Finding(
            rule=NAME,
            title="Compile-bound cell",
            cell_index=cell.index,
            severity=severity(compile_s, ctx.total_wall),
            confidence=0.95,  # compile seconds are measured by JAX's and Numba's own events
            evidence={
                "wall_s": round(wall, 4),
                "compile_s": round(compile_s, 4),
                "run_s": cell.run_s,
                "compile_share": round(share, 3),
                "jax_compiles": cell.jax.compiles if cell.jax else None,
                "numba_compiles": cell.numba.compiles if cell.numba else None,
                "compiled": encode(contributors[:6]),
                "seconds_at_stake": round(compile_s, 4),
            },
            summary=(
                f"{seconds(compile_s)} of its {seconds(wall)} ({share:.0%}) compiling"
                + (f", mostly `{top.name}` ({top.kind})" if top else "")
            ),
            fix=fix,
            highlights=highlights,
            action=action,
        )
    yield from _notebook_finding(ctx, limit, flagged)


def _notebook_finding(ctx: Context, limit: Mapping[str, float], flagged: float) -> Iterator[Outcome]:
    """A notebook whose compiles are spread thin over many cells: no single cell was flagged for most of it."""
    total_compile = ctx.totals.compile_s
    wall = ctx.total_wall
    if total_compile is not None and wall > 0:
        share = total_compile / wall
        if (
            total_compile >= limit["notebook_min_s"]
            and share >= limit["notebook_share"]
            and flagged < 0.5 * total_compile
        ):
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
                    "compiles": ctx.totals.compiles,
                    "numba_compiles": ctx.totals.numba_compiles,
                    "seconds_at_stake": round(total_compile - flagged, 4),
                },
                summary=f"the notebook spends {seconds(total_compile)} of {seconds(wall)} ({share:.0%}) compiling, spread over many cells",
                highlights=[
                    ("compiles", f"{ctx.totals.compiles} JAX, {ctx.totals.numba_compiles} Numba"),
                    ("in flagged cells", seconds(flagged)),
                ],
                **_notebook_advice(ctx),
            )


def _notebook_advice(ctx: Context) -> Advice:
    persist, persist_short = _persist(ctx)
    if nbscope_cache(ctx) is None:
        return {
            "action": "persist compiled programs: JAX_COMPILATION_CACHE_DIR, Numba cache=True in your own functions",
            "fix": (
                "Persist compiled programs across runs (JAX_COMPILATION_CACHE_DIR with "
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0; `cache=True` on the notebook's own Numba functions), "
                "and fuse small eager steps into fewer jitted functions."
            ),
        }
    return {
        "action": f"{persist_short}; fuse small eager steps into fewer jitted functions",
        "fix": (
            f"For JAX, {persist}. Add `cache=True` to the notebook's own Numba functions, and fuse small eager "
            "steps into fewer jitted functions."
        ),
    }


RULE = Rule(NAME, evaluate, generic=True, thresholds=THRESHOLDS)
