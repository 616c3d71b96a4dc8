"""Host-driven loop: a Python loop that calls JAX on each iteration (``z[i, j] = f(x[i], y[j])``), in a cell that
spends its time running, not compiling. Each call is one dispatch from Python: a program launched, its argument
sliced, its result copied back. A few microseconds each on a CPU; on a GPU or TPU each launch and copy costs far
more, so thousands of tiny calls cost seconds that one call on whole arrays does not.

Evidence: the loop in the cell's source (or in a plain function the cell calls) and the JAX calls in its body;
how many iterations it ran, from the values its ranges were given when the cell ran (the run's bindings), or how
many programs the cell executed (program data, ``nbscope profile --programs``); and the cell's run time. The rule
fires only when the time per iteration is small (``max_per_iteration_s``): a loop of a few heavy calls is not
dispatch-bound. Where the program data timed the programs' own work, the loop must be mostly outside it.

On a GPU or TPU the fix also offers the CPU for the unchanged loop (and ``diagnose --try`` tries it), but only where
the cell's compiled programs take small arguments (``max_cpu_elements``): a step over 500,000 firms is work the CPU
would do too. A loop whose steps feed each other (``x = step(x)``) is moved into one jitted loop; one that maps over
elements is vectorised.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from nbscope._redact import shorten
from nbscope.analyse.diagnose import _bindings, _source
from nbscope.analyse.diagnose._base import Context, Finding, Outcome, Rule, Skip, seconds, severity
from nbscope.collect.cell_python import in_source_order
from nbscope.schema.model import Cell

NAME = "host-loop"
THRESHOLDS = {
    "min_run_s": 1.0,  # the cell runs (not compiles) at least this long ...
    "min_iterations": 500,  # ... in a loop of at least this many iterations (or JAX executions) ...
    "max_per_iteration_s": 0.005,  # ... each this short: tiny calls, not heavy work
    "max_cpu_elements": 100_000,  # on a device, the CPU is advised only for calls on arrays this small or smaller
}
_ACCELERATORS = ("gpu", "tpu")
_DIMS = re.compile(r"\[([\d,\s]*)\]")  # an argument's dimensions in a recorded shape: float32[500000]


@dataclass(frozen=True)
class HostLoop:
    """A Python loop of a cell that makes JAX calls, and how many iterations of its JAX calls ran (None: unknown)."""

    line: int  # in the cell
    code: str  # the loop's header, as written
    calls: tuple[str, ...]  # the JAX calls in its body
    iterations: int | None
    origin: str  # where the iterations come from, or why they are unknown
    function: str | None = None  # the plain function it is written in; None: the cell itself
    carried: tuple[str, ...] = ()  # names each step feeds to the next (``x = step(x)``): a recurrence, not a map


def _header(node: ast.For | ast.While) -> str:
    if isinstance(node, ast.For):
        text = f"for {ast.unparse(node.target)} in {ast.unparse(node.iter)}"
    else:
        text = f"while {ast.unparse(node.test)}"
    return shorten(text, 60)


def _trips(node: ast.For | ast.While, env: Mapping[str, _bindings.Bound]) -> _bindings.Bound:
    """How many times a loop's body ran: a ``range`` or a literal sequence with known bounds, else unknown."""
    if isinstance(node, ast.While):
        return _bindings.Bound(None, f"`{_header(node)}` ends on a condition")
    if _breaks(node):
        return _bindings.Bound(None, f"`{_header(node)}` may end early (a `break` or `return` in it)")
    iterable = node.iter
    if isinstance(iterable, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in iterable.elts):
        return _bindings.Bound(len(iterable.elts), "a literal")
    parts = _bindings.range_parts(iterable)
    if parts is not None:
        start, stop, step = parts
        bounds = [
            _bindings.evaluate(part, env) if part is not None else _bindings.Bound(default, "a literal")
            for part, default in ((start, 0), (stop, None), (step, 1))
        ]
        unknown = next((b for b in bounds if b.value is None), None)
        if unknown is not None:
            return unknown
        count = _bindings.range_length(*(b.value or 0 for b in bounds))
        if count is None:
            return _bindings.Bound(None, "range() with a zero step")
        origin = " and ".join(dict.fromkeys(b.origin for b in bounds if b.origin != "a literal")) or "a literal"
        return _bindings.Bound(count, origin)
    return _bindings.Bound(None, f"`{shorten(ast.unparse(iterable), 40)}` has a length known only when it runs")


def _breaks(loop: ast.For) -> bool:
    """Whether the loop can end before its range does: a ``break`` of its own (not an inner loop's) or a ``return``."""
    stack: list[ast.AST] = list(loop.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Return, ast.Break)):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)):  # an inner loop's break ends only that loop
            stack.extend(n for n in ast.walk(node) if isinstance(n, ast.Return))
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _calls_by_loop(body: list[ast.stmt], jitted: set[str], aliases: set[str]) -> dict[int, list[str]]:
    """The JAX calls in the body of each loop among ``body`` (by the loop node's id), for loops that make any."""
    calls_in: dict[int, list[str]] = {}
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, (ast.For, ast.While)) and (found := _source.jax_calls(node.body, jitted, aliases)):
                calls_in[id(node)] = found
    return calls_in


def _outermost(body: list[ast.stmt], calls_in: Mapping[int, list[str]]) -> Iterator[ast.For | ast.While]:
    """The outermost loops among ``body`` that make JAX calls (not those of functions ``body`` defines)."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.For, ast.While)) and id(node) in calls_in:
            yield node
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _iterations(
    node: ast.For | ast.While, calls_in: Mapping[int, list[str]], env: Mapping[str, _bindings.Bound]
) -> _bindings.Bound:
    """How many times the JAX calls of a loop ran: its trips times those of the inner loop that makes the most."""
    own = _trips(node, env)
    inner = [_iterations(child, calls_in, env) for child in _outermost(node.body, calls_in)]
    counts = inner or [_bindings.Bound(1, "a literal")]  # calls in its own body run once a trip
    unknown = next((b for b in [own, *counts] if b.value is None), None)
    if unknown is not None:
        return unknown
    most = max(counts, key=lambda b: b.value or 0)
    origin = " and ".join(dict.fromkeys(b.origin for b in (own, most) if b.origin != "a literal")) or "a literal"
    return _bindings.Bound((own.value or 0) * (most.value or 0), origin)


def host_loops(ctx: Context, cell: Cell) -> list[HostLoop]:
    """The Python loops that call JAX when ``cell`` runs: in its own code, or in a plain function it calls."""
    tree = ctx.bindings.tree(cell.index)
    if tree is None:
        return []
    code = ctx.code
    jitted = _jax_functions(ctx, cell.index)
    calls_in = _calls_by_loop(tree.body, jitted, code.jax_aliases)
    found = []
    for node in _outermost(tree.body, calls_in):
        # The names as the loop's statement started: its ranges' bounds as this run gave them.
        count = _iterations(node, calls_in, ctx.bindings.at(cell.index, node.lineno))
        calls = tuple(dict.fromkeys(calls_in[id(node)]))
        found.append(HostLoop(node.lineno, _header(node), calls, count.value, count.origin, None, _carried(node)))
    if found:
        return found
    for name in sorted(code.calls_in(cell.index) & code.defined_plain_at(cell.index)):
        function = code.function_at(name, cell.index)
        if function is None or function.node is None:
            continue
        local = _jax_locals(function.node, jitted, code.jax_aliases)
        in_function = _calls_by_loop(function.node.body, jitted | local, code.jax_aliases)
        for node in _outermost(function.node.body, in_function):
            # A function's loop runs with the call's arguments, not the notebook's names: it is counted only by the
            # programs the run saw execute.
            calls = tuple(dict.fromkeys(in_function[id(node)]))
            why = f"a loop in `{name}` runs with the arguments of its call"
            found.append(HostLoop(node.lineno, _header(node), calls, None, why, name, _carried(node)))
    return found


def _jax_functions(ctx: Context, at: int) -> set[str]:
    """Names whose call runs JAX when cell ``at`` runs: jitted functions, functions JAX compiled, and plain notebook
    functions whose bodies call JAX (``def g(x): return jnp.exp(x)``), through each other."""
    code = ctx.code
    plain = [f.node for name in code.defined_plain_at(at) if (f := code.function_at(name, at)) is not None and f.node]
    return _calling_jax(plain, ctx.jax_functions_at(at), code.jax_aliases)


def _jax_locals(function: ast.FunctionDef | ast.AsyncFunctionDef, jax: set[str], aliases: set[str]) -> set[str]:
    """Names inside ``function`` whose call runs JAX: bound to a JAX transform (``f_prime = jax.grad(f)``) or
    defined there with a body that calls JAX (``def q(x): return x - f(x) / f_prime(x)``)."""
    transforms = {
        node.targets[0].id
        for node in ast.walk(function)
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Call)
        and _source.dotted(node.value.func).split(".")[0] in aliases
    }
    nested = [
        n for n in ast.walk(function) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not function
    ]
    return _calling_jax(nested, jax | transforms, aliases) - jax


def _calling_jax(functions: list[ast.FunctionDef | ast.AsyncFunctionDef], jax: set[str], aliases: set[str]) -> set[str]:
    """``jax`` with every function of ``functions`` whose body calls JAX, directly or through another of them."""
    found = set(jax)
    grew = True
    while grew:
        grew = False
        for function in functions:
            if function.name not in found and _source.jax_calls(function.body, found, aliases):
                found.add(function.name)
                grew = True
    return found


def _carried(loop: ast.For | ast.While) -> tuple[str, ...]:
    """Names one step hands to the next: read by a statement with a call (``x = step(x)``, ``key, k = split(key)``)
    before the step assigns them, and assigned in the loop; for a ``while`` loop, also the names its condition reads
    that its body assigns."""
    assigned_in_loop = {n.id for n in ast.walk(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    found: dict[str, None] = {}
    assigned_this_step: set[str] = set()
    for statement in loop.body:
        for node in in_source_order(statement):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                read = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
                if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                    read.add(node.target.id)
                if any(isinstance(n, ast.Call) for n in ast.walk(node.value)):
                    found.update(dict.fromkeys(sorted((read & assigned_in_loop) - assigned_this_step)))
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                assigned_this_step |= {
                    n.id
                    for t in targets
                    for n in ast.walk(t)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                }
    if isinstance(loop, ast.While):
        found.update(
            dict.fromkeys(sorted({n.id for n in ast.walk(loop.test) if isinstance(n, ast.Name)} & assigned_in_loop))
        )
    # Loop variables (this loop's and its inner loops') are handed on by the loops, not by a step.
    for inner in (n for n in ast.walk(loop) if isinstance(n, (ast.For, ast.comprehension))):
        for name in {n.id for n in ast.walk(inner.target) if isinstance(n, ast.Name)}:
            found.pop(name, None)
    return tuple(found)


def _executions(cell: Cell) -> int | None:
    """How many programs the cell executed, when the probe counted every one."""
    programs = cell.programs
    if programs is None or not programs.counted:
        return None
    counts = [e.count for e in programs.executions]
    return sum(int(c) for c in counts if c is not None) if all(c is not None for c in counts) else None


def _largest_argument(cell: Cell) -> int | None:
    """The most elements of any argument of the programs JAX compiled in the cell (its loop's first steps); None: it
    compiled none (they were compiled earlier, and a name may have been compiled for other shapes there)."""
    shapes = [s for f in (cell.jax.functions if cell.jax is not None else ()) for s in f.shapes]
    sizes = [math.prod(int(d) for d in dims.split(",") if d.strip()) for s in shapes for dims in _DIMS.findall(s)]
    return max(sizes) if sizes else None


def _programs_work(cell: Cell) -> float | None:
    """Seconds the cell's programs spent in their own work (XLA:CPU's thunks, each program's summed over its
    executions; threads may make it exceed the wall time); None: not timed."""
    programs = cell.programs
    timed = [e.cpu_s for e in programs.executions] if programs is not None else []
    if programs is None or not timed or any(t is None for t in timed):
        return None  # not timed: a device's programs (the host trace sees their launches, not their work)
    return max(sum(float(t) for t in timed if t is not None), float(programs.cpu_busy_s or 0.0))


def evaluate(ctx: Context) -> Iterator[Outcome]:
    if not any(c.jax for c in ctx.run.cells):
        return  # JAX never imported: no call is dispatched
    limit = ctx.limits(NAME, THRESHOLDS)
    platform = ctx.backend.platform
    for cell in ctx.run.cells:
        running = cell.run_s or 0.0
        if cell.jax is None or running < limit["min_run_s"] or running < (cell.compile_s or 0.0):
            continue
        if not ctx.has_sources:
            yield Skip(NAME, f"needs the cell sources to find loops: {ctx.missing_sources()}", cell.index)
            return
        loops = host_loops(ctx, cell)
        if not loops:
            continue
        outcome = _judge(ctx, cell, loops, limit, platform)
        if outcome is not None:
            yield outcome


def _judge(
    ctx: Context, cell: Cell, loops: list[HostLoop], limit: Mapping[str, float], platform: str | None
) -> Outcome | None:
    running = cell.run_s or 0.0
    loop = max(loops, key=lambda found: found.iterations or 0)
    executions = _executions(cell)
    count, unit = (loop.iterations, "iteration") if loop.iterations is not None else (executions, "execution")
    if count is None:
        return Skip(
            NAME,
            f"{cell.label} runs a Python loop of JAX calls (`{loop.code}`, {seconds(running)} running): how many times "
            f"it called JAX is unknown ({loop.origin}); `nbscope profile --programs` counts the programs it ran",
            cell.index,
        )
    per = running / count if count else None
    if count < limit["min_iterations"] or per is None or per > limit["max_per_iteration_s"]:
        return None
    busy = _programs_work(cell)
    if busy is not None and busy >= running / 2:
        return None  # the programs' own work is most of the time: heavy calls, not dispatches
    largest = _largest_argument(cell)
    # The CPU is a remedy for a loop of small calls: where a call works on a large array, the CPU would do that work.
    on_device = platform in _ACCELERATORS and largest is not None and largest <= limit["max_cpu_elements"]
    calls = ", ".join(f"`{c}`" for c in loop.calls[:3])
    where = f" in `{loop.function}`" if loop.function else ""
    counted = f"{count:,} {unit}s" if unit == "execution" else f"{count:,} iterations"
    return Finding(
        rule=NAME,
        title="Python loop of JAX calls",
        cell_index=cell.index,
        severity=severity(running, ctx.total_wall),
        confidence=0.8 if unit == "iteration" else 0.7,
        evidence={
            "platform": platform,
            "loop": loop.code,
            "line_in_cell": loop.line,
            "function": loop.function,
            "carried": list(loop.carried),
            "jax_calls": list(loop.calls[:8]),
            "iterations": loop.iterations,
            "iterations_from": loop.origin,
            "executions": executions,
            "run_s": round(running, 4),
            "per_iteration_s": round(per, 7) if unit == "iteration" else None,
            "per_execution_s": round(running / executions, 7) if executions else None,
            "programs_busy_s": round(busy, 4) if busy is not None else None,
            "largest_argument_elements": largest,
            "cpu_advised": on_device,  # the fix offers the CPU (what `diagnose --try` tries)
            "seconds_at_stake": round(running, 4),
        },
        summary=(
            f"`{loop.code}`{where} calls {calls} on each step: {seconds(running)} running over {counted}, "
            f"{seconds(per)} per {unit}, each call dispatched from Python"
            + (f" to the {platform.upper()} and its result copied back" if on_device and platform else "")
        ),
        highlights=[
            ("loop", shorten(f"line {loop.line}{where}: {loop.code} ({loop.origin})", 110)),
            ("run", f"{seconds(running)} for {counted}; {seconds(per)} each"),
        ]
        + ([("executions", f"{executions:,} programs executed")] if executions else []),
        action=("move the loop into one jitted function" if loop.carried else "call JAX once on whole arrays")
        + (" or run the loop on the CPU" if on_device else ""),
        fix=_fix(loop, on_device, platform),
    )


def _fix(loop: HostLoop, on_device: bool, platform: str | None) -> str:
    if loop.carried:  # each step needs the last one's result: one program running every step, not a wider call
        names = ", ".join(f"`{n}`" for n in loop.carried[:3])
        primitive = (
            "`lax.while_loop`"
            if loop.code.startswith("while")
            else "`lax.fori_loop` (or `lax.scan` to keep every step's value)"
        )
        change = (
            f"Move the loop into one jitted function: each step feeds the next ({names}), so write it as {primitive} "
            "and call JAX once for the whole loop."
        )
    else:
        change = (
            "Call JAX once on whole arrays instead of once per element: broadcasting (`f(x[:, None], y[None, :])`, "
            "or `jnp.meshgrid`) or `jax.vmap(f)`."
        )
    if not on_device:
        return change
    return (
        f"{change} Without changing the loop, run it on the CPU, where a call launches nothing on the "
        f"{(platform or 'device').upper()} and copies nothing back: `with jax.default_device(jax.devices('cpu')[0]):` "
        "around the loop, with the arrays it reads moved there first (`x = jax.device_put(x, jax.devices('cpu')[0])`"
        "): an array made on the device stays there, and each step would copy it back."
    )


RULE = Rule(NAME, evaluate, thresholds=THRESHOLDS)
