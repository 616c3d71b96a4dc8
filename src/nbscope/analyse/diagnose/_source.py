"""Static reading of notebook cell sources: jitted functions, loops inside them, timing regions.

Records keep only a hash and the first line of each cell, so rules that need code read the notebook
again (``nbscope.record.sources.load_sources``). Everything here works on the Python that IPython would run: magics
(``%timeit``, ``!pip``) are first turned into ``get_ipython().run_line_magic(...)`` calls.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeGuard

from nbscope._redact import shorten
from nbscope.collect.cell_python import timeit_statement

_JIT_NAMES = ("jit", "pjit", "filter_jit")
_LOOP_PRIMITIVES = ("scan", "fori_loop", "while_loop", "associative_scan", "map")
_TIMER_FUNCTIONS = {
    "time.time",
    "time.perf_counter",
    "time.monotonic",
    "time.process_time",
    "time.time_ns",
    "time.perf_counter_ns",
    "time.monotonic_ns",
    "perf_counter",
    "perf_counter_ns",
    "monotonic",
    "default_timer",
    "timeit.default_timer",
    "tic",
    "toc",
    "qe.tic",
    "qe.toc",
    "quantecon.tic",
    "quantecon.toc",
    "qe.tac",
    "tac",
    "datetime.now",
    "datetime.datetime.now",
}
_TIMER_CONTEXTS = ("Timer", "timer", "Timing", "timing", "timed", "stopwatch")
# Calls that wait for a JAX result: whatever consumes its values on the host.
_SYNC_ATTRIBUTES = ("block_until_ready", "item", "tolist", "device_get", "copy_to_host_async")
_SYNC_CALLS = {
    "float",
    "int",
    "bool",
    "complex",
    "print",
    "np.asarray",
    "np.array",
    "numpy.asarray",
    "numpy.array",
    "onp.asarray",
    "onp.array",
    "jax.device_get",
    "jax.block_until_ready",
    "repr",
    "str",
}
_NUMPY_NAMES = ("np", "numpy", "onp")
_NOT_WORK = {
    "jax.devices",
    "jax.device_count",
    "jax.config.update",
    "jax.default_backend",
    "jax.block_until_ready",
    "jax.local_devices",
    "jax.device_get",
    "jax.print_environment_info",
    "jax.jit",
    "jax.vmap",
    "jax.grad",
}


def to_python(source: str) -> str:
    """The cell as plain Python: IPython's own transforms, or magic lines blanked when IPython is absent."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return str(TransformerManager().transform_cell(source))
    except Exception:  # IPython missing or a transform error: keep the Python lines only
        return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _leading_blank_lines(text: str) -> int:
    lines = text.splitlines()
    return next((i for i, line in enumerate(lines) if line.strip()), len(lines))


def parse(source: str) -> ast.Module | None:
    """The cell's Python, with line numbers as in the cell (IPython drops leading blank lines: added back)."""
    try:
        return ast.parse(source)  # plain Python: IPython's transforms would change nothing (and import IPython, 0.3 s)
    except (SyntaxError, ValueError):
        pass
    try:
        python = to_python(source)
        tree = ast.parse(python)
    except (SyntaxError, ValueError):
        return None
    offset = _leading_blank_lines(source) - _leading_blank_lines(python)
    return ast.increment_lineno(tree, offset) if offset > 0 else tree


def dotted(node: ast.AST) -> str:
    """``jax.numpy.sum`` for an attribute chain, ``f`` for a name, ``""`` otherwise."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _is_jit(node: ast.AST) -> tuple[bool, bool]:
    """Whether an expression is a jit decorator; the second flag says it has static arguments."""
    if isinstance(node, ast.Call):
        name = dotted(node.func)
        keywords = {k.arg for k in node.keywords}
        static = bool(keywords & {"static_argnums", "static_argnames"})
        if name.split(".")[-1] in _JIT_NAMES:
            return True, static
        if name.split(".")[-1] == "partial" and node.args:
            inner, _ = _is_jit(node.args[0])
            return inner, static
        return False, False
    return dotted(node).split(".")[-1] in _JIT_NAMES, False


@dataclass
class SourceLoop:
    line: int  # line within the cell (1-based)
    kind: str  # "for" or "while"
    iterates: str  # the iterable or condition, as written
    # A trip count read from the source alone: a literal (range(200)), or a global the notebook assigns once to an
    # integer. A length that depends on when the function ran (a default, a static argument, a global assigned
    # twice) is None here: _bindings.loop_length resolves it from the run.
    trips: int | None
    function: str  # the function it is written in
    node: ast.For | ast.While | None = field(default=None, repr=False, compare=False)


@dataclass
class Function:
    """A function defined in a notebook cell."""

    name: str
    cell: int  # code-cell index
    line: int
    jitted: bool = False
    static_args: bool = False
    loops: list[SourceLoop] = field(default_factory=list)
    primitives: list[str] = field(default_factory=list)  # lax.scan, fori_loop, ... called in its body
    calls: set[str] = field(default_factory=set)
    node: ast.FunctionDef | ast.AsyncFunctionDef | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class NumbaDefinition:
    """Where a notebook decorates a function with Numba, and the options its decorator sets."""

    cell: int  # the code cell that defines it
    line: int  # the decorator's line in that cell: where `cache=True` goes
    cache: bool
    parallel: bool


@dataclass
class NotebookCode:
    """What the cells of one notebook define and call."""

    functions: dict[str, Function] = field(default_factory=dict)  # the last definition of each name
    definitions: list[Function] = field(default_factory=list)  # every definition, in notebook order
    constants: dict[str, int] = field(default_factory=dict)
    calls_by_cell: dict[int, set[str]] = field(default_factory=dict)
    x64_cells: list[int] = field(default_factory=list)  # cells that turn jax_enable_x64 on
    numba_functions: dict[str, NumbaDefinition] = field(default_factory=dict)  # the last definition of each name
    numba_definitions: list[tuple[str, NumbaDefinition]] = field(default_factory=list)  # every one, in notebook order
    jax_aliases: set[str] = field(default_factory=set)  # jax, jnp, lax, random (from jax)
    numba_aliases: set[str] = field(default_factory=set)  # numba, nb
    numba_names: set[str] = field(default_factory=set)  # njit, jit, prange imported from numba
    imported: dict[str, str] = field(default_factory=dict)  # local name -> what it imports ("qe" -> "quantecon")
    numpy_arrays: set[str] = field(default_factory=set)  # globals every assignment binds to a NumPy call's result
    trees: dict[int, ast.Module] = field(default_factory=dict, repr=False)  # code-cell index -> parsed cell

    @property
    def jitted(self) -> set[str]:
        return {name for name, function in self.functions.items() if function.jitted}

    def function_at(self, name: str, at: int | None = None) -> Function | None:
        """The definition of ``name`` in force at code cell ``at`` (the last one at or before it)."""
        if at is None:
            return self.functions.get(name)
        return next((f for f in reversed(self.definitions) if f.name == name and f.cell <= at), None)

    def _defined_at(self, at: int) -> dict[str, Function]:
        """Each name's definition in force when cell ``at`` runs (a later definition does not count)."""
        return {function.name: function for function in self.definitions if function.cell <= at}

    def jitted_at(self, at: int) -> set[str]:
        """Names bound to jitted functions when cell ``at`` runs (a later ``@jax.jit def f`` does not count)."""
        return {name for name, function in self._defined_at(at).items() if function.jitted}

    def defined_plain_at(self, at: int) -> set[str]:
        """Names bound to plain (not jitted) notebook functions when cell ``at`` runs."""
        return {name for name, function in self._defined_at(at).items() if not function.jitted}

    def calls_in(self, cell: int) -> set[str]:
        """What code cell ``cell`` calls, by dotted name (none for a cell whose code is unknown)."""
        return self.calls_by_cell.get(cell, set())

    def numba_function_at(self, name: str, at: int | None = None) -> NumbaDefinition | None:
        """The Numba definition of ``name`` in force at code cell ``at`` (a lecture may define a function twice)."""
        if at is None:
            return self.numba_functions.get(name)
        return next(
            (info for defined, info in reversed(self.numba_definitions) if defined == name and info.cell <= at), None
        )

    def traced_by(self, name: str, at: int | None = None) -> list[Function]:
        """The function and every notebook function it calls (all are traced into its program)."""
        seen: dict[str, Function] = {}
        stack = [name]
        while stack:
            current = stack.pop()
            function = self.function_at(current, at)
            if function is None or current in seen:
                continue
            seen[current] = function
            stack.extend(function.calls)
        return list(seen.values())

    def loops_in(self, name: str, at: int | None = None) -> list[SourceLoop]:
        return [loop for function in self.traced_by(name, at) for loop in function.loops]

    def primitives_in(self, name: str, at: int | None = None) -> list[str]:
        return sorted({p for function in self.traced_by(name, at) for p in function.primitives})


def _int_value(node: ast.AST, constants: Mapping[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _trips(node: ast.For, constants: Mapping[str, int]) -> int | None:
    iterable = node.iter
    if isinstance(iterable, ast.Call) and dotted(iterable.func) == "range":
        args = [_int_value(a, constants) for a in iterable.args]
        if len(args) == 1 and args[0] is not None:
            return max(0, args[0])
        if len(args) >= 2 and args[0] is not None and args[1] is not None:
            step = args[2] if len(args) > 2 and args[2] else 1
            return max(0, (args[1] - args[0] + step - 1) // step) if step > 0 else None
    if isinstance(iterable, (ast.List, ast.Tuple)):
        return len(iterable.elts)
    return None


def analyse(sources: Mapping[int, str]) -> NotebookCode:
    """Read every cell (code-cell index -> source) once."""
    code = NotebookCode()
    trees: dict[int, ast.Module] = {}
    assigned: Counter[str] = Counter()  # how many times each global is bound, in any way
    for index, source in sorted(sources.items()):
        tree = parse(source)
        if tree is None:
            continue
        trees[index] = tree
        assigned.update(bound_names(tree))
        for node in tree.body:  # module-level integer constants: n = 200, N = 10_000_000
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value = _int_value(node.value, {})
                if value is not None:
                    code.constants[node.targets[0].id] = value
    # A constant stands for its name only when the notebook binds that name once: `n = 50_000_000` in one cell and
    # `n = 20` in another make `n` depend on where it is read (see _bindings).
    code.constants = {name: value for name, value in code.constants.items() if assigned[name] == 1}
    code.numpy_arrays = _numpy_arrays(trees.values(), assigned)
    code.trees = trees
    for tree in trees.values():
        _imports(code, tree)
    if not code.jax_aliases:
        code.jax_aliases = {"jax", "jnp", "lax"}  # the usual names, when no import was readable
    for index, tree in trees.items():
        _collect(code, index, tree)
    return code


def _numpy_arrays(trees: Iterable[ast.Module], assigned: Mapping[str, int]) -> set[str]:
    """Globals bound only by ``name = np.<function>(...)`` (``z = np.empty((n, n))``): NumPy arrays wherever read."""
    made: Counter[str] = Counter()
    for tree in trees:
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call)
                and dotted(node.value.func).split(".")[0] in _NUMPY_NAMES
            ):
                made[node.targets[0].id] += 1
    return {name for name, count in made.items() if name in assigned and count == assigned[name]}


def bound_names(node: ast.AST) -> list[str]:
    """Every global name a statement or cell binds, once per binding (assignments, loops, imports, definitions and
    the names their ``global`` statements rebind; not the names local to the functions it defines)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name, *(name for sub in ast.walk(node) if isinstance(sub, ast.Global) for name in sub.names)]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return [node.id]
    return [
        name for child in ast.iter_child_nodes(node) if not isinstance(child, ast.Lambda) for name in bound_names(child)
    ]


def _imports(code: NotebookCode, tree: ast.Module) -> None:
    """Which local names stand for jax and numba (``import jax.numpy as jnp``, ``from numba import njit``), and
    what every imported name stands for (``qe`` -> ``quantecon``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                bound = alias.asname or root
                code.imported[bound] = alias.name if alias.asname else root
                if root == "jax":
                    code.jax_aliases.add(bound)
                elif root == "numba":
                    code.numba_aliases.add(bound)
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            for alias in node.names:
                bound = alias.asname or alias.name
                code.imported[bound] = f"{node.module}.{alias.name}"
                if root == "jax":
                    code.jax_aliases.add(bound)
                elif root == "numba":
                    code.numba_names.add(bound)


def _decorator_kind(code: NotebookCode, decorator: ast.AST) -> str | None:
    """ "jax" for a JAX jit decorator, "numba" for a Numba one, None otherwise."""
    name = dotted(decorator.func if isinstance(decorator, ast.Call) else decorator)
    root = name.split(".")[0]
    if root in code.numba_aliases or (name in code.numba_names and name not in code.jax_aliases):
        return "numba"
    jitted, _ = _is_jit(decorator)
    return "jax" if jitted else None


def _sets_true(decorator: ast.AST, option: str) -> bool:
    """Whether a decorator call passes ``option=True`` (``@numba.jit(cache=True)``)."""
    return isinstance(decorator, ast.Call) and any(
        k.arg == option and isinstance(k.value, ast.Constant) and k.value.value is True for k in decorator.keywords
    )


def _collect(code: NotebookCode, index: int, tree: ast.Module) -> None:
    calls: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = Function(name=node.name, cell=index, line=node.lineno, node=node)
            for decorator in node.decorator_list:
                kind = _decorator_kind(code, decorator)
                if kind == "jax":
                    function.jitted = True
                    function.static_args = _is_jit(decorator)[1]
                elif kind == "numba":
                    code.numba_functions[node.name] = NumbaDefinition(
                        cell=index,
                        line=decorator.lineno,
                        cache=_sets_true(decorator, "cache"),
                        parallel=_sets_true(decorator, "parallel"),
                    )
                    code.numba_definitions.append((node.name, code.numba_functions[node.name]))
            _scan_body(code, function, node)
            # A later definition of the same name (a corrected version) replaces the earlier one.
            code.functions[node.name] = function
            code.definitions.append(function)
        elif isinstance(node, ast.Call):
            name = dotted(node.func)
            if name:
                calls.add(name)
            if name.split(".")[-1] in _JIT_NAMES and node.args and isinstance(node.args[0], ast.Name):
                # g = jax.jit(f): f is traced under its own name
                static = any(k.arg in ("static_argnums", "static_argnames") for k in node.keywords)
                target = code.function_at(node.args[0].id, index)
                if target is not None:
                    target.jitted = True
                    target.static_args = target.static_args or static
            if name.endswith("config.update") and len(node.args) > 1:
                first, value = node.args[0], node.args[1]
                if isinstance(first, ast.Constant) and first.value == "jax_enable_x64":
                    if isinstance(value, ast.Constant) and value.value:
                        code.x64_cells.append(index)
    code.calls_by_cell[index] = calls


def calls_into(tree: ast.Module, imported: Mapping[str, str], package: str) -> list[ast.Call]:
    """Calls in a cell to what it imported from ``package`` (``qe.tauchen(...)`` after ``import quantecon as qe``),
    in source order."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            root = dotted(node.func).split(".")[0]
            if root and imported.get(root, "").split(".")[0] == package:
                found.append(node)
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    args = node.args
    return [
        *args.posonlyargs,
        *args.args,
        *([args.vararg] if args.vararg else []),
        *args.kwonlyargs,
        *([args.kwarg] if args.kwarg else []),
    ]


def _locals(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names local to a function: its parameters and what its body binds (a loop's ``n`` is then not the global)."""
    names = {a.arg for a in parameters(node)}
    declared_global: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Global):
            declared_global.update(child.names)
        elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            names.add(child.id)
    return names - declared_global


def _scan_body(code: NotebookCode, function: Function, node: ast.AST) -> None:
    for child in ast.walk(node):
        if child is node:
            continue
        if isinstance(child, ast.For):
            local = _locals(node) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else set()
            constants = {k: v for k, v in code.constants.items() if k not in local}
            function.loops.append(
                SourceLoop(
                    child.lineno,
                    "for",
                    shorten(ast.unparse(child.iter), 80),
                    _trips(child, constants),
                    function.name,
                    child,
                )
            )
        elif isinstance(child, ast.While):
            function.loops.append(
                SourceLoop(child.lineno, "while", shorten(ast.unparse(child.test), 80), None, function.name, child)
            )
        elif isinstance(child, ast.Call):
            name = dotted(child.func)
            last = name.split(".")[-1]
            if last in _LOOP_PRIMITIVES and (last != "map" or name.endswith("lax.map")):
                function.primitives.append(f"lax.{last}")
            elif name and "." not in name:
                function.calls.add(name)


# ---- timing regions -----------------------------------------------------------------------------


@dataclass
class TimedRegion:
    """Code whose duration a cell measures."""

    how: str  # "%timeit", "%time", "with qe.Timer", "time.perf_counter", ...
    line: int
    nodes: list[ast.AST]


def _parse_fragment(text: str) -> list[ast.AST]:
    try:
        return list(ast.parse(text).body)
    except SyntaxError:
        return []


def _magic_region(node: ast.Call) -> TimedRegion | None:
    # get_ipython().run_line_magic(...): the receiver is a call, so match the attribute alone.
    name = node.func.attr if isinstance(node.func, ast.Attribute) else dotted(node.func)
    if name not in ("run_line_magic", "run_cell_magic") or len(node.args) < 2:
        return None
    magic = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
    if magic not in ("time", "timeit", "prun"):
        return None
    if name.endswith("run_line_magic"):
        text = node.args[1].value if isinstance(node.args[1], ast.Constant) else ""
        body = _parse_fragment(timeit_statement(str(text)))
        return TimedRegion(f"%{magic}", node.lineno, body)
    text = node.args[2].value if len(node.args) > 2 and isinstance(node.args[2], ast.Constant) else ""
    setup = node.args[1].value if isinstance(node.args[1], ast.Constant) else ""
    statement = timeit_statement(str(setup))
    return TimedRegion(f"%%{magic}", node.lineno, _parse_fragment(str(text)) + _parse_fragment(statement))


def _is_timer_call(node: ast.AST) -> TypeGuard[ast.Call]:
    return isinstance(node, ast.Call) and dotted(node.func) in _TIMER_FUNCTIONS


def timed_regions(tree: ast.Module) -> list[TimedRegion]:
    regions: list[TimedRegion] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            region = _magic_region(node)
            if region is not None:
                regions.append(region)
            elif dotted(node.func) in ("timeit.timeit", "timeit.repeat", "timeit") and node.args:
                stmt = node.args[0]
                if isinstance(stmt, ast.Lambda):
                    regions.append(TimedRegion("timeit.timeit", node.lineno, [stmt.body]))
                elif isinstance(stmt, ast.Constant) and isinstance(stmt.value, str):
                    regions.append(TimedRegion("timeit.timeit", node.lineno, _parse_fragment(stmt.value)))
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                expr = item.context_expr
                name = dotted(expr.func if isinstance(expr, ast.Call) else expr)
                if name and name.split(".")[-1].startswith(_TIMER_CONTEXTS):
                    regions.append(TimedRegion(f"with {name}", node.lineno, list(node.body)))
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            for block in (body, getattr(node, "orelse", None) or []):
                marks = [i for i, statement in enumerate(block) if any(_is_timer_call(c) for c in ast.walk(statement))]
                # The timed work is what runs between the first and the last clock read; the statements that
                # read the clock are left out (``print(time.time() - t0)`` prints after the clock stopped).
                if len(marks) >= 2 and marks[-1] - marks[0] > 1:
                    span = block[marks[0] + 1 : marks[-1]]
                    first = next(c for c in ast.walk(block[marks[0]]) if _is_timer_call(c))
                    regions.append(TimedRegion(dotted(first.func), block[marks[0]].lineno, span))
    return regions


def _walk(nodes: Iterable[ast.AST]) -> Iterator[ast.AST]:
    for node in nodes:
        yield from ast.walk(node)


def jax_calls(nodes: Iterable[ast.AST], jitted: Iterable[str], jax_aliases: Iterable[str]) -> list[str]:
    """Calls in the code that start JAX work: jax/jnp/lax functions and the notebook's jitted functions."""
    jitted, aliases = set(jitted), set(jax_aliases)
    found = []
    for node in _walk(nodes):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Call) and _is_jit(node.func.func)[0]:
                found.append(f"{dotted(node.func.func)}(...)(...)")  # jax.jit(f)(x): compiles and runs
                continue
            name = dotted(node.func)
            if not name or name in _NOT_WORK or name.startswith("jax.config"):
                continue
            if name.split(".")[0] in aliases and "." in name or name in jitted:
                found.append(name)
    return found


def synchronisations(nodes: Iterable[ast.AST], host_arrays: Iterable[str] = ()) -> list[str]:
    """Anything in the code that waits for a JAX result (explicitly or by reading its values). ``host_arrays``:
    names bound to NumPy arrays, which copy a JAX value written into them (``z[i, j] = f(x)``) to the host."""
    found = []
    host = set(host_arrays)
    for node in _walk(nodes):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            computed = any(isinstance(n, (ast.Call, ast.Name)) for n in ast.walk(node.value))  # not `out[0] = 1.0`
            for target in targets:
                if (
                    computed
                    and isinstance(target, ast.Subscript)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in host
                ):
                    found.append(f"{target.value.id}[...] =")  # a NumPy array stores the value: it waits for it
        if isinstance(node, ast.Call):
            name = dotted(node.func)
            if isinstance(node.func, ast.Attribute) and node.func.attr in _SYNC_ATTRIBUTES:
                found.append(node.func.attr)
            elif name in _SYNC_CALLS or (name.split(".")[0] in _NUMPY_NAMES and node.args):
                found.append(name)  # a NumPy function given a JAX array copies it to the host: it waits
        elif isinstance(node, ast.JoinedStr):
            found.append("f-string")  # formatting a value reads it
    return found
