"""Slow first call beyond compile: a call that a later cell repeats (same function, same shapes) took much
longer the first time, and compiling explains only part of it.

Two kinds of second sample: a later cell of the same run that makes the same call (the same statements,
comments, timing magics and assignment targets aside; or, whatever surrounds it — ``with Timer():``,
``%time``, prints, ``.block_until_ready()`` — the same call of the notebook's own function with the same
arguments), where the JAX functions the first call compiled run
again without compiling (so with the same shapes and dtypes) or, for other code, the names the call reads
are not rebound in between; or, with ``--repeat``, the cell's later runs in fresh kernels. Each first call
is compared with its repeat after taking out each one's own compile time.

The likely cause is named only from evidence the run holds: the kernel's memory grew in the first call and
not in the repeat (first-touch allocation: the operating system maps and zeroes fresh pages), the first
parallel Numba call or first call into a package in the notebook (thread pools and lazy imports start
there), reads from the JAX persistent cache. With ``--repeat``, what differs between fresh kernels lies
outside the kernel (files the cell reads or writes, the OS page cache, persistent caches).
"""

from __future__ import annotations

import ast
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Annotated, Any

from nbscope import _units as units
from nbscope._redact import shorten
from nbscope.analyse.diagnose import _source
from nbscope.analyse.diagnose._base import Context, Finding, Outcome, Rule, Skip, severity
from nbscope.schema.codec import Write, encode, never
from nbscope.schema.model import Cell

NAME = "slow-first-call"
THRESHOLDS = {
    "min_ratio": 1.5,  # the first call, its compile taken out, at least this many times its repeat ...
    "min_gap_s": 1.0,  # ... and at least this many seconds slower
    "min_growth_bytes": 256 * 2**20,  # memory growth of the first call worth naming as its cause
}
_ALLOCATORS = {
    "zeros",
    "empty",
    "ones",
    "full",
    "zeros_like",
    "empty_like",
    "ones_like",
    "full_like",
    "eye",
    "identity",
    "tile",
    "repeat",
    "standard_normal",
    "normal",
    "uniform",
    "random",
    "integers",
    "rand",
    "randn",
}
_ARRAY_ROOTS = ("np", "numpy", "jnp", "onp", "rng", "random", "jax")
_SILENT = ("print", "display")


@dataclass(frozen=True)
class _Pair:
    first: Cell
    repeat: Cell
    how: str  # why the two cells run the same call with the same shapes
    other_work: tuple[str, ...] = ()  # statements of the first cell, beside the call, that also do work


def _work_key(tree: ast.Module | None) -> tuple[str, ...]:
    """The work a cell does, without what does not change it: comments, timing magics, the names results are
    assigned to, prints."""
    if tree is None:
        return ()
    key = []
    for statement in tree.body:
        if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and statement.value is not None:
            node: ast.AST = statement.value
        elif isinstance(statement, ast.Expr):
            node = statement.value
            if (
                isinstance(node, ast.Call)
                and _source.dotted(node.func) in _SILENT
                or isinstance(node, (ast.Name, ast.Constant))
            ):
                continue
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            continue
        else:
            node = statement
        key.append(ast.dump(node, annotate_fields=False))
    return tuple(key) if any("Call" in item for item in key) else ()


def _read_names(tree: ast.Module) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _user_compiled(cell: Cell) -> set[str]:
    """The notebook's own JAX functions the cell really compiled (persistent-cache hits aside)."""
    return {f.name for f in (cell.jax.functions if cell.jax else ()) if f.kind == "user" and f.count > f.cache_hits}


def _compiles(cell: Cell) -> int:
    return (cell.jax.compiles if cell.jax else 0) + (cell.numba.compiles if cell.numba else 0)


def _recompiled(cell: Cell, called: set[str]) -> bool:
    """The cell compiled one of the functions it calls again (new shapes or dtypes: not a repeat), or Numba
    compiled (new types). Eager and library compiles elsewhere in the cell leave the call the same; its
    compile time is taken out of both sides anyway."""
    if cell.numba is not None and cell.numba.compiles:
        return True
    return bool(_user_compiled(cell) & called)


def _ran_to_its_end(ctx: Context) -> list[Cell]:
    """The cells that finished without error and have a wall time: the only ones whose times compare."""
    return [c for c in ctx.run.cells if c.status == "ok" and c.wall_s is not None]


def _cost(cell: Cell) -> float:
    """A cell's wall time without its compiles."""
    return (cell.wall_s or 0.0) - (cell.compile_s or 0.0)


def _pairs(ctx: Context) -> list[_Pair]:
    """Each first call with its fastest repeat in the same kernel."""
    trees = ctx.bindings.trees
    groups: dict[tuple[str, ...], list[Cell]] = {}
    for cell in _ran_to_its_end(ctx):
        key = _work_key(ctx.bindings.tree(cell.index))
        if key:
            groups.setdefault(key, []).append(cell)
    pairs = []
    for cells in groups.values():
        first, later = cells[0], cells[1:]
        compiled = _user_compiled(first)
        candidates = []
        for repeat in later:
            tree = trees[repeat.index]
            calls = {_source.dotted(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
            if _recompiled(repeat, calls | compiled):
                continue  # it compiled again: new shapes or dtypes, not a repeat
            if compiled and compiled <= calls:
                candidates.append(
                    (repeat, f"{', '.join(sorted(compiled))} ran again without compiling: same shapes and dtypes")
                )
                continue
            read = _read_names(tree)
            between = set().union(*(ctx.bindings.bound_in(i) for i in range(first.index, repeat.index + 1)))
            if not read & between:
                candidates.append((repeat, "the same statements on the same names, not rebound in between"))
        if candidates:
            repeat, how = min(candidates, key=lambda item: _cost(item[0]))
            pairs.append(_Pair(first, repeat, how))
    return pairs


def _calls_run(ctx: Context, index: int, tree: ast.AST) -> dict[str, ast.Call]:
    """The calls of the notebook's own functions (plain, jitted or Numba) in a cell, by what they run: the
    function's name and its arguments as written. Whatever wraps them (``with Timer():``, ``%time``, a
    ``.block_until_ready()``, ``jnp.max(...)``, a print) does not change the key."""
    jitted = ctx.code.jitted_at(index)
    found: dict[str, ast.Call] = {}
    for call in (n for n in _run_here(tree) if isinstance(n, ast.Call)):
        name = _source.dotted(call.func)
        if not name or (
            name not in jitted
            and ctx.code.function_at(name, index) is None
            and ctx.code.numba_function_at(name, index) is None
        ):
            continue
        arguments = [ast.dump(a, annotate_fields=False) for a in call.args]
        arguments += [f"{k.arg}={ast.dump(k.value, annotate_fields=False)}" for k in call.keywords]
        found.setdefault(f"{name}({', '.join(arguments)})", call)
    return found


def _bound_around(tree: ast.Module, call: ast.Call, *, after: bool) -> set[str]:
    """Names the cell binds after (or before) the top-level statement holding ``call``, and the names that
    statement binds itself (a ``for`` target, a ``with ... as``: the call may read them, one value per pass)."""
    holder = next((i for i, statement in enumerate(tree.body) if any(n is call for n in ast.walk(statement))), None)
    if holder is None:
        return set()
    statements = tree.body[holder + 1 :] if after else tree.body[:holder]
    own = tree.body[holder]
    inner = [] if isinstance(own, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr)) else _source.bound_names(own)
    return set(inner).union(*(_source.bound_names(statement) for statement in statements))


def _run_here(tree: ast.AST) -> Iterator[ast.AST]:
    """The nodes a cell runs when it runs: not the bodies of the functions and lambdas it defines."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        yield from _run_here(node)


def _other_work(tree: ast.Module, call: ast.Call) -> tuple[str, ...]:
    """The first cell's statements that call something beside the paired call (definitions, imports,
    prints and constants aside): their time is in the first cell's wall too."""
    found = []
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            continue
        if any(node is call for node in ast.walk(statement)):
            continue
        calls = [n for n in ast.walk(statement) if isinstance(n, ast.Call) and _source.dotted(n.func) not in _SILENT]
        if calls:
            text = ast.unparse(statement).splitlines()[0]
            found.append(shorten(text, 60))
    return tuple(found[:3])


def _call_pairs(ctx: Context, taken: set[int]) -> list[_Pair]:
    """First calls paired with a later cell's identical call, whatever surrounds either: a cell that calls
    the notebook's function ``f`` with the same arguments as an earlier cell, compiles nothing, and reads
    no name rebound after the earlier call, repeats it with the same shapes."""
    trees = ctx.bindings.trees
    ran = _ran_to_its_end(ctx)
    calls = {c.index: _calls_run(ctx, c.index, trees[c.index]) for c in ran if c.index in trees}
    pairs = []
    for position, first in enumerate(ran):
        index = first.index
        if index in taken or not calls.get(index):
            continue
        compiled = _user_compiled(first)
        best: tuple[float, Cell, str, ast.Call] | None = None
        for repeat in ran[position + 1 :]:
            later = repeat.index
            shared = sorted(calls[index].keys() & calls.get(later, {}).keys())
            called = {key.split("(")[0] for key in shared}
            if not shared or _recompiled(repeat, called | compiled):
                continue  # it compiled again: new shapes or dtypes, not a repeat
            between = set().union(*(ctx.bindings.bound_in(i) for i in range(index + 1, later)))
            for key in shared:
                call = calls[later][key]
                # Also rebound: after the call in the first cell, before it in the repeat's own cell.
                rebound = (
                    between
                    | _bound_around(trees[index], calls[index][key], after=True)
                    | _bound_around(trees[later], call, after=False)
                )
                read = _read_names(ast.Module(body=[ast.Expr(call)], type_ignores=[]))
                names = {name for name in compiled if name.split(".")[0] in read}
                if names:
                    how = f"{', '.join(sorted(names))} ran again without compiling: same shapes and dtypes"
                elif read & rebound:
                    continue
                else:
                    how = f"the same call, {key.split('(')[0]}(…) on names not rebound in between"
                cost = _cost(repeat)
                if best is None or cost < best[0]:
                    best = (cost, repeat, how, calls[index][key])
                break
        if best is not None:
            _, repeat, how, call = best
            pairs.append(_Pair(first, repeat, how, _other_work(trees[index], call)))
    return pairs


def _growth(cell: Cell) -> int | None:
    """How much the kernel's resident memory grew during the cell, when both ends were measured."""
    rss = cell.rss
    return (
        int(rss.after_bytes - rss.before_bytes)
        if rss.before_bytes is not None and rss.after_bytes is not None
        else None
    )


def _size(value: float | None) -> str:
    return f"{value / 1e9:.1f} GB" if value is not None and abs(value) >= 1e8 else f"{(value or 0) / 1e6:.0f} MB"


def _allocations(ctx: Context, index: int) -> list[str]:
    """Array allocations in the cell and in the notebook functions it calls: "`np.empty((n, m))` ×3 in `simulate`"."""
    tree = ctx.bindings.tree(index)
    places: list[tuple[str, ast.AST]] = [("", tree)] if tree is not None else []
    for name in sorted(ctx.code.calls_in(index)):
        for function in ctx.code.traced_by(name, index):
            if function.node is not None:
                places.append((function.name, function.node))
    found: Counter[tuple[str, str]] = Counter()
    for where, node in places:
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            name = _source.dotted(call.func)
            parts = name.split(".")
            if (
                len(parts) > 1
                and parts[-1] in _ALLOCATORS
                and parts[0] in _ARRAY_ROOTS
                and (call.args or call.keywords)
            ):
                text = ast.unparse(call)
                key = (shorten(text, 50), where)
                found[key] += 1
    return [
        f"`{text}`" + (f" ×{count}" if count > 1 else "") + (f" in `{where}`" if where else "")
        for (text, where), count in list(found.items())[:3]
    ]


FIRST_TOUCH = "first-touch allocation"


def _not_allocation(owner: object) -> bool:
    """A cause other than first-touch allocation: its evidence has no memory figures."""
    return isinstance(owner, Cause) and owner.cause != FIRST_TOUCH


@dataclass(frozen=True, slots=True)
class Cause:
    """A likely cause of a slow first call, the evidence for it (as the finding's evidence lists it), and what to
    do about it."""

    cause: str
    evidence: str
    fix: Annotated[str, Write(when=never)]
    memory_growth_bytes: Annotated[int | None, Write(omit=_not_allocation)] = None
    repeat_growth_bytes: Annotated[int | None, Write(omit=_not_allocation)] = None
    allocations: Annotated[tuple[str, ...], Write(omit=_not_allocation)] = ()


def _packages(ctx: Context, calls: Iterable[str]) -> set[str]:
    """The packages these calls go into, by what the notebook imported (``qe.tauchen`` -> quantecon)."""
    imported = ctx.code.imported
    return {imported[name.split(".")[0]].split(".")[0] for name in calls if name.split(".")[0] in imported}


def _causes(ctx: Context, first: Cell, repeat: Cell) -> list[Cause]:
    """Evidence for the likely causes of a slow first call in a kernel, strongest first."""
    limit = ctx.limits(NAME, THRESHOLDS)
    index = first.index
    causes: list[Cause] = []
    grew, grew_again = _growth(first), _growth(repeat)
    if grew is not None and grew >= limit["min_growth_bytes"] and (grew_again is None or grew_again < grew / 2):
        allocations = _allocations(ctx, index)
        again = f", {_size(grew_again)} in the repeat" if grew_again is not None else ""
        causes.append(
            Cause(
                FIRST_TOUCH,
                f"memory grew {_size(grew)} here{again}"
                + (f": first-touch allocation of {', '.join(allocations)}" if allocations else ""),
                "time a repeat (or warm up first) when you measure the method; to shrink the cost, touch less memory: "
                "fewer or smaller arrays (every k-th step, float32), allocated once and reused",
                memory_growth_bytes=grew,
                repeat_growth_bytes=grew_again,
                allocations=tuple(allocations),
            )
        )
    earlier = set().union(*(ctx.code.calls_in(c.index) for c in ctx.run.cells if c.index < index))
    calls = ctx.code.calls_in(index)
    parallel = sorted(
        n for n in calls - earlier if (defined := ctx.code.numba_function_at(n, index)) and defined.parallel
    )
    if parallel:
        causes.append(
            Cause(
                "thread-pool start-up",
                f"the notebook's first call of parallel Numba code ({', '.join(parallel)}): its threads start here",
                "make one small parallel call in the setup cell so the threads start before the work you time",
            )
        )
    fresh = sorted(
        _packages(ctx, calls) - _packages(ctx, earlier) - set(sys.stdlib_module_names) - {"jax", "numpy", "numba"}
    )
    if fresh:
        causes.append(
            Cause(
                "lazy imports",
                f"the notebook's first call into {', '.join(fresh)}: modules it imports on first use load here",
                "import (and touch once) the package in the notebook's import cell, before the work you time",
            )
        )
    hits = first.jax.cache_hits if first.jax else 0
    if hits and first.jax:
        causes.append(
            Cause(
                "persistent-cache reads",
                f"{hits} programs read from the JAX persistent cache ({units.seconds(first.jax.cache_retrieval_s)} retrieving)",
                "nothing to fix: reading compiled programs from the cache is faster than compiling them",
            )
        )
    return causes


def _finding(
    ctx: Context,
    first: Cell,
    first_s: float,
    repeat_s: float,
    compared: str,
    how: str,
    causes: list[Cause],
    extra: dict[str, Any],
    *,
    subject: str = "first call",
    other_work: tuple[str, ...] = (),
) -> Finding:
    """``compared``: "its repeat in cell 4" or "the median of 2 later runs"."""
    compile_s = first.compile_s or 0.0
    gap = first_s - repeat_s
    ratio = first_s / repeat_s if repeat_s > 0 else float("inf")
    lead = causes[0] if causes else None
    compiled = f"not compile ({units.seconds(compile_s)})" if compile_s > 0 else "no compile"
    summary = (
        f"{subject} {ratio:.1f}× slower than {compared} ({units.seconds(first_s + compile_s)} vs {units.seconds(repeat_s)}): "
        f"{compiled}"
        + (f"; {lead.evidence}" if lead else "")
        + (f"; the cell also runs `{'`, `'.join(other_work)}`: part of the gap may be theirs" if other_work else "")
    )
    if lead is not None:
        action = lead.fix
        fix = f"The {units.seconds(gap)} are paid once, by the first call ({lead.cause}): {action}."
    else:
        fix = (
            f"The {units.seconds(gap)} are paid once per kernel, and the run holds no evidence of why: time a repeat rather "
            "than the first call, and profile with `--timeline` to see where the first call spends them."
        )
        action = "time a repeat rather than the first call; `--timeline` shows where the first one goes"
    highlights = [
        (
            subject,
            f"{units.seconds(first_s + compile_s)}"
            + (f" with {units.seconds(compile_s)} compiling" if compile_s > 0 else "")
            + f"; {compared}: {units.seconds(repeat_s)}; gap {units.seconds(gap)}",
        )
    ]
    highlights += [(cause.cause, cause.evidence) for cause in causes[1:3]]
    if len(highlights) < 3:
        highlights.append(("same call", how))
    return Finding(
        rule=NAME,
        title="Slow first call (not compile)",
        cell_index=first.index,
        severity=severity(gap, ctx.total_wall),
        confidence=(0.8 if causes else 0.6) - (0.2 if other_work else 0.0),
        evidence={
            "first_s": round(first_s + compile_s, 4),
            "first_compile_s": round(compile_s, 4),
            "first_beyond_compile_s": round(first_s, 4),
            "repeat_s": round(repeat_s, 4),
            "repeat": compared,
            "ratio": round(ratio, 2),
            "gap_s": round(gap, 4),
            "same_call": how,
            "causes": encode(causes),
            "other_work": list(other_work),
            **extra,
            "seconds_at_stake": round(gap, 4),
        },
        summary=summary,
        fix=fix,
        highlights=highlights,
        action=action,
    )


def _beyond_compile(wall: float | None, compile_s: float | None) -> float:
    return max(0.0, (wall or 0.0) - (compile_s or 0.0))


def _runtime_start(ctx: Context, cell: Cell, repeat: Cell | None, limit: dict[str, float]) -> Finding | None:
    """The cell that opened the accelerator's runtime (``NotebookRun.runtime_start``): its time beyond compile,
    less its repeat's where a later cell repeats it, is the start's (with whatever else the first run paid). Not
    the cell's to fix: every kernel pays it once, and pinning the cell's functions to the CPU only moves it."""
    first_s = _beyond_compile(cell.wall_s, cell.compile_s)
    repeat_s = _beyond_compile(repeat.wall_s, repeat.compile_s) if repeat is not None else 0.0
    start_s = first_s - repeat_s
    if start_s < limit["min_gap_s"]:
        return None
    kind = "TPU" if ctx.backend.platform == "tpu" else "GPU"
    grew = _growth(cell)
    how = (
        f"{units.seconds(start_s)} of {cell.label}, the first cell to touch the {kind} (its {units.seconds(first_s)} "
        f"beyond compile less its repeat's {units.seconds(repeat_s)} in {repeat.label})"
        if repeat
        else f"up to {units.seconds(start_s)} of {cell.label}, the first cell to touch the {kind} (its time beyond "
        "compile: no later cell repeats it to take the cell's own work out)"
    )
    memory = (
        f"; the kernel's memory grew {_size(grew)} here, the runtime's start included" if grew and grew > 2**30 else ""
    )
    return Finding(
        rule=NAME,
        title=f"{kind} runtime start (not compile)",
        cell_index=cell.index,
        severity="low",  # paid once per kernel wherever it lands: the fix is in what is timed, not in the code
        confidence=0.8 if repeat else 0.6,
        evidence={
            "runtime_start_s": round(start_s, 4),
            "first_s": round(cell.wall_s or 0.0, 4),
            "first_compile_s": round(cell.compile_s or 0.0, 4),
            "repeat_s": round(repeat_s, 4) if repeat else None,
            "repeat_cell": repeat.index if repeat else None,
            "memory_growth_bytes": grew,
            "seconds_at_stake": round(start_s, 4),
        },
        summary=f"{kind} runtime start: {how}{memory}",
        fix=(
            f"Opening the {kind} runtime is paid once per kernel, by the first cell that touches the device: nothing "
            f"in this cell to fix, and pinning its functions to the CPU would only move the {units.seconds(start_s)} "
            "to the next cell that uses the device. To keep it out of a cell you time, open the device in the setup "
            "cell (`jax.devices()`)."
        ),
        highlights=[
            ("runtime start", f"{units.seconds(start_s)}, once per kernel"),
            ("cell", f"{units.seconds(cell.wall_s or 0.0)} with {units.seconds(cell.compile_s or 0.0)} compiling"),
            ("repeat", f"{repeat.label}: {units.seconds(repeat_s)}" if repeat else "none in this run"),
        ],
        action="open the device in the setup cell (`jax.devices()`) so a timed cell does not pay the start",
    )


def evaluate(ctx: Context) -> Iterator[Outcome]:
    limit = ctx.limits(NAME, THRESHOLDS)
    flagged: set[int] = set()
    start = ctx.run.runtime_start
    start_repeat: Cell | None = None
    if ctx.has_sources:
        whole = _pairs(ctx)
        for pair in [*whole, *_call_pairs(ctx, {p.first.index for p in whole})]:
            first_s = _beyond_compile(pair.first.wall_s, pair.first.compile_s)
            repeat_s = _beyond_compile(pair.repeat.wall_s, pair.repeat.compile_s)
            if start is not None and pair.first.index == start.index:
                if start_repeat is None or _cost(pair.repeat) < _cost(start_repeat):
                    start_repeat = pair.repeat  # named below, as the runtime's start
                continue
            if first_s - repeat_s < limit["min_gap_s"] or first_s < limit["min_ratio"] * repeat_s:
                continue
            flagged.add(pair.first.index)
            yield _finding(
                ctx,
                pair.first,
                first_s,
                repeat_s,
                f"its repeat in {pair.repeat.label}",
                pair.how,
                _causes(ctx, pair.first, pair.repeat),
                {"repeat_cell": pair.repeat.index},
                other_work=pair.other_work,
            )
    elif any(_compiles(c) for c in ctx.run.cells):
        yield Skip(NAME, f"needs the cell sources to find cells that repeat a call: {ctx.missing_sources()}")
    if start is not None and start.status == "ok" and start.wall_s is not None:
        found = _runtime_start(ctx, start, start_repeat, limit)
        if found is not None:
            flagged.add(start.index)
            yield found
    for cell in ctx.run.cells:  # --repeat: the same cell in later, fresh kernels
        if cell.samples is None:
            continue
        walls, compiles = list(cell.samples.wall_s), list(cell.samples.compile_s)
        if len(walls) < 2 or len(compiles) != len(walls) or cell.index in flagged:
            continue
        if any(status != "ok" for status in cell.samples.status):
            continue
        first_s = _beyond_compile(walls[0], compiles[0])
        later = statistics.median(_beyond_compile(w, c) for w, c in zip(walls[1:], compiles[1:], strict=True))
        if first_s - later < limit["min_gap_s"] or first_s < limit["min_ratio"] * later:
            continue
        # Each run is a fresh kernel: what only the first run paid (thread pools, imports and memory are paid by
        # every kernel) was found done by the later ones, outside the kernel.
        first = replace(cell, wall_s=walls[0], compile_s=compiles[0])
        causes = [
            Cause(
                "state outside the kernel",
                f"only the first of {len(walls)} runs, each in a fresh kernel, was slow: files the cell reads "
                "or writes, the OS page cache or a persistent cache differ between runs",
                fix="",
            )
        ]  # the finding's fix is written below
        finding = _finding(
            ctx,
            first,
            first_s,
            later,
            f"the median of {len(walls) - 1} later runs",
            "the same cell in fresh kernels (--repeat)",
            causes,
            {"samples_wall_s": walls},
            subject="first run",
        )
        finding.fix = (
            f"Only the first of {len(walls)} runs paid these {units.seconds(first_s - later)}: the cell finds something "
            "already done in later runs (a data file it wrote, files in the OS page cache, a persistent cache). "
            "Expect it in every fresh CI job; keep that state between jobs (e.g. actions/cache) to avoid it."
        )
        finding.action = "keep between CI jobs what the first run creates (data files, caches)"
        yield finding


RULE = Rule(NAME, evaluate, thresholds=THRESHOLDS)
