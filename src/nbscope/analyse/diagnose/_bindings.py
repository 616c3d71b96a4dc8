"""What an integer name holds at a given point of a notebook, and so how many steps a loop ran.

A finding may only state a number the run used. A notebook runs its cells in order: a name read at a
statement holds its last assignment before it, earlier in the same cell, else in the latest earlier cell;
never "the last assignment anywhere". A parameter's default is evaluated when the ``def`` runs; a value
passed at the call (a static argument) wins over it; a global is read when JAX traces the function, i.e.
during the cell that compiles it. Anything less certain (a binding inside a loop or a branch, a tuple
unpacking, an import, a value computed by a call) makes the value unknown, and the finding says so
instead of guessing.

Python loops inside jit leave no loop in the program JAX compiles (they are unrolled), so their length
comes from these bindings; loops JAX keeps (``lax.fori_loop``) carry their trip count in the program data.
"""

from __future__ import annotations

import ast
import bisect
import itertools
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field

from nbscope._redact import shorten
from nbscope.analyse.diagnose import _source
from nbscope.collect.cell_python import python_of as python_of

_MAX_EXPONENT = 64  # 10 ** 9 is a loop length; 10 ** 10 ** 10 is not worth computing


@dataclass(frozen=True)
class Bound:
    """An integer value, or None when it cannot be known, with where it comes from (or why not)."""

    value: int | None
    origin: str


@dataclass
class LoopLength:
    """How many steps a loop ran, from the values its range was given in this run."""

    trips: int | None  # None: unknown (or differing between compiles: see ``values``)
    values: list[int] = field(default_factory=list)  # each distinct length seen (one per compile)
    origin: str = ""  # where the numbers come from, or why they are unknown
    start: str = "0"  # the range's bounds as written: code a finding may propose (always valid in the function)
    stop: str | None = None
    step: str | None = None


def evaluate(node: ast.AST | None, env: Mapping[str, Bound]) -> Bound:
    """An integer expression's value under ``env`` (literals, names, + - * // % **, int(1e6))."""
    if node is None:
        return Bound(None, "no value")
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return Bound(node.value, "a literal")
    if isinstance(node, ast.Name):
        return env.get(node.id) or Bound(None, f"`{node.id}` is not assigned before this point")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = evaluate(node.operand, env)
        return Bound(-inner.value if inner.value is not None else None, inner.origin)
    if isinstance(node, ast.Call) and _source.dotted(node.func) == "int" and len(node.args) == 1 and not node.keywords:
        argument = node.args[0]
        if isinstance(argument, ast.Constant) and isinstance(argument.value, float) and argument.value.is_integer():
            return Bound(int(argument.value), "a literal")
        return evaluate(argument, env)
    if isinstance(node, ast.BinOp):
        left, right = evaluate(node.left, env), evaluate(node.right, env)
        unknown = next((b for b in (left, right) if b.value is None), None)
        if unknown is not None:
            return unknown
        assert left.value is not None and right.value is not None
        origin = " and ".join(dict.fromkeys(b.origin for b in (left, right) if b.origin != "a literal")) or "a literal"
        value = _arithmetic(node.op, left.value, right.value)
        return Bound(
            value, origin if value is not None else f"`{ast.unparse(node)}` is not an integer nbscope computes"
        )
    return Bound(None, f"`{shorten(ast.unparse(node), 40)}` is computed when the notebook runs")


def _arithmetic(op: ast.operator, a: int, b: int) -> int | None:
    if isinstance(op, ast.Add):
        return a + b
    if isinstance(op, ast.Sub):
        return a - b
    if isinstance(op, ast.Mult):
        return a * b
    if isinstance(op, ast.FloorDiv) and b:
        return a // b
    if isinstance(op, ast.Mod) and b:
        return a % b
    if isinstance(op, ast.Pow) and 0 <= b <= _MAX_EXPONENT:
        return int(a**b)
    return None


class _Recorder(dict[str, Bound]):
    """The names as the notebook runs, each change kept with the step (top-level statement) that made it: the names
    at any earlier point are a view (:class:`_Snapshot`), not a copy per statement (quadratic in a notebook's
    length: 715 MB for 5,000 cells)."""

    def __init__(self) -> None:
        super().__init__()
        self.step = 0
        self.changes: dict[str, list[tuple[int, Bound]]] = {}

    def __setitem__(self, name: str, value: Bound) -> None:
        super().__setitem__(name, value)
        self.changes.setdefault(name, []).append((self.step, value))


class _Snapshot(MutableMapping[str, Bound]):
    """The names as they were before step ``step`` of a :class:`_Recorder` (its changes are only appended to); what
    the caller sets is kept apart, over them."""

    def __init__(self, changes: dict[str, list[tuple[int, Bound]]], step: int) -> None:
        self._changes, self._step = changes, step
        self._set: dict[str, Bound] = {}

    def __getitem__(self, name: str) -> Bound:
        if name in self._set:
            return self._set[name]
        if name not in self._changes:
            raise KeyError(name)
        found = self._changes[name]
        position = bisect.bisect_left(found, self._step, key=lambda change: change[0])
        if position == 0:
            raise KeyError(name)
        return found[position - 1][1]

    def __setitem__(self, name: str, value: Bound) -> None:
        self._set[name] = value

    def __delitem__(self, name: str) -> None:
        del self._set[name]  # the names before the step are not the caller's to remove

    def __iter__(self) -> Iterator[str]:
        earlier = (name for name, found in self._changes.items() if found[0][0] < self._step and name not in self._set)
        return itertools.chain(self._set, earlier)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Bindings:
    """Integer names over a notebook run in order: what each holds before any top-level statement."""

    def __init__(self, sources: Mapping[int, str]) -> None:
        self.trees: dict[int, ast.Module] = {}
        # per cell: (first line, last line, the step before the statement, names it binds, whether it holds statements)
        self._points: dict[int, list[tuple[int, int, int, set[str], bool]]] = {}
        self._starts: dict[int, int] = {}  # the step each cell starts at
        env = _Recorder()
        for cell, source in sorted(sources.items()):
            tree = python_of(source)
            self._starts[cell] = env.step
            if tree is None:
                continue
            self.trees[cell] = tree
            for statement in tree.body:
                bound = set(_source.bound_names(statement))
                compound = any(
                    isinstance(getattr(statement, part, None), list) for part in ("body", "orelse", "handlers")
                )
                self._points.setdefault(cell, []).append(
                    (statement.lineno, statement.end_lineno or statement.lineno, env.step, bound, compound)
                )
                self._apply(env, statement, cell, bound)
                env.step += 1
        self._changes, self._end = env.changes, env.step

    @staticmethod
    def _apply(env: dict[str, Bound], statement: ast.stmt, cell: int, bound: set[str]) -> None:
        where = f"cell {cell + 1}, line {statement.lineno}"
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            value_node = statement.value
            if (
                len(targets) == 1
                and isinstance(targets[0], ast.Tuple)
                and isinstance(value_node, ast.Tuple)
                and len(targets[0].elts) == len(value_node.elts)
                and all(isinstance(t, ast.Name) for t in targets[0].elts)
                and not any(isinstance(v, ast.Starred) for v in value_node.elts)
            ):
                # `n, β, K = 20, 0.99, 100`: each name its own value (all read before any is bound)
                values = [evaluate(v, env) for v in value_node.elts]
                for target, item, value in zip(targets[0].elts, value_node.elts, values, strict=True):
                    assert isinstance(target, ast.Name)
                    text = f"`{target.id} = {shorten(ast.unparse(item), 40)}` in `{shorten(ast.unparse(statement), 50)}` ({where})"
                    env[target.id] = Bound(value.value, text if value.value is not None else f"{text}: {value.origin}")
                return
            if all(isinstance(t, ast.Name) for t in targets):
                value = evaluate(statement.value, env)
                text = f"`{shorten(ast.unparse(statement), 60)}` ({where})"
                for target in targets:
                    assert isinstance(target, ast.Name)
                    env[target.id] = Bound(value.value, text if value.value is not None else f"{text}: {value.origin}")
                return
        if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
            combined = ast.BinOp(left=ast.Name(statement.target.id, ast.Load()), op=statement.op, right=statement.value)
            value = evaluate(combined, env)
            env[statement.target.id] = Bound(value.value, f"`{shorten(ast.unparse(statement), 60)}` ({where})")
            return
        kind = type(statement).__name__.lower().replace("asyncfunctiondef", "def").replace("functiondef", "def")
        for name in bound:
            env[name] = Bound(None, f"`{name}` is bound by a {kind} statement ({where})")

    def tree(self, cell: int) -> ast.Module | None:
        """The code cell's parsed code; None: its code is unknown, or is not Python that parses."""
        return self.trees.get(cell)

    def bound_in(self, cell: int) -> set[str]:
        """The global names a code cell binds (none when its code is unknown)."""
        tree = self.tree(cell)
        return set(_source.bound_names(tree)) if tree is not None else set()

    def start(self, cell: int) -> MutableMapping[str, Bound]:
        """Names as the cell starts (the caller may change its copy)."""
        return _Snapshot(self._changes, self._starts.get(cell, self._end))

    def at(self, cell: int, line: int) -> MutableMapping[str, Bound]:
        """Names as line ``line`` of ``cell`` runs: those before its top-level statement; a name bound inside
        that statement (a loop or branch around the line) is unknown there."""
        for first, last, step, bound, compound in self._points.get(cell, ()):
            if first <= line <= last:
                shown = _Snapshot(self._changes, step)
                if compound:  # a simple statement reads its names before it binds any
                    for name in bound:
                        shown[name] = Bound(
                            None, f"`{name}` changes within the statement at cell {cell + 1}, line {first}"
                        )
                return shown
        return self.start(cell)


def range_parts(iterable: ast.expr) -> tuple[ast.expr | None, ast.expr, ast.expr | None] | None:
    """The start, stop and step of a ``range(...)`` call as written (None where left out); None: not such a call."""
    if not (
        isinstance(iterable, ast.Call)
        and _source.dotted(iterable.func) == "range"
        and 1 <= len(iterable.args) <= 3
        and not iterable.keywords
    ):
        return None
    args = list(iterable.args)
    return (args[0], args[1], args[2] if len(args) > 2 else None) if len(args) > 1 else (None, args[0], None)


def range_length(start: int, stop: int, step: int) -> int | None:
    """How many values ``range(start, stop, step)`` gives (None: a zero step), without ``len(range(...))``'s overflow
    past 2**63."""
    if step == 0:
        return None
    return max(0, (stop - start + step - (1 if step > 0 else -1)) // step)


def calls_to(tree: ast.Module, name: str) -> list[ast.Call]:
    """Direct calls ``name(...)`` in a cell, in order."""
    found = [
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
    ]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def _argument(call: ast.Call, function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str) -> ast.expr | None:
    """The expression a call passes for ``parameter`` (None: not passed, so the default applies)."""
    for keyword in call.keywords:
        if keyword.arg == parameter:
            return keyword.value
    positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if parameter in positional:
        position = positional.index(parameter)
        if position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
            return call.args[position]
    return None


def _default(function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str) -> ast.expr | None:
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    offset = len(positional) - len(args.defaults)
    for position, arg in enumerate(positional):
        if arg.arg == parameter and position >= offset:
            return args.defaults[position - offset]
    for arg, value in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        if arg.arg == parameter:
            return value
    return None


@dataclass
class _Site:
    """A place where the jitted function was called (and so traced): its cell, line and the call itself."""

    cell: int
    line: int
    call: ast.Call | None  # None: the cell compiled it through another function; no direct call to read


class LoopResolver:
    """Loop lengths of the functions one jitted function traces, from the calls in the cells that compiled it."""

    def __init__(
        self, bindings: Bindings, code: _source.NotebookCode, entry: _source.Function, compiled_in: Iterable[int]
    ) -> None:
        self.bindings = bindings
        self.code = code
        self.entry = entry
        self.sites: list[_Site] = []
        for cell in sorted(set(compiled_in)):
            tree = bindings.tree(cell)
            calls = calls_to(tree, entry.name) if tree is not None else []
            self.sites += [_Site(cell, call.lineno, call) for call in calls] or [_Site(cell, 0, None)]

    def length(self, loop: _source.SourceLoop) -> LoopLength:
        node = loop.node
        function = (
            self.code.function_at(loop.function, self.entry.cell) if loop.function != self.entry.name else self.entry
        )
        if not isinstance(node, ast.For) or function is None or function.node is None:
            return LoopLength(None, origin="a while loop: its length is decided at run time")
        iterable = node.iter
        if isinstance(iterable, (ast.List, ast.Tuple)):
            return LoopLength(
                len(iterable.elts), [len(iterable.elts)], "a literal sequence", stop=str(len(iterable.elts))
            )
        parts = range_parts(iterable)
        if parts is None:
            return LoopLength(
                None,
                origin=f"iterates over `{shorten(ast.unparse(iterable), 40)}`: its length is known only at run time",
            )
        start, stop, step = parts
        shown = LoopLength(
            None,
            start=ast.unparse(start) if start is not None else "0",
            stop=ast.unparse(stop),
            step=ast.unparse(step) if step is not None else None,
        )
        lengths: list[int] = []
        origins: list[str] = []
        for site in self.sites:
            values = [
                self._value(part, function, site) if part is not None else Bound(default, "")
                for part, default in ((start, 0), (stop, None), (step, 1))
            ]
            unknown = next((b for b in values if b.value is None), None)
            if unknown is not None:
                shown.origin = unknown.origin
                return shown
            first, last, stride = (b.value for b in values)
            assert first is not None and last is not None and stride is not None
            length = range_length(first, last, stride)
            if length is None:
                shown.origin = "a range with step 0"
                return shown
            lengths.append(length)
            origins += [b.origin for b in values if b.origin and b.origin != "a literal"]
        distinct = sorted(set(lengths))
        shown.values = distinct
        shown.trips = distinct[0] if len(distinct) == 1 else None
        shown.origin = "; ".join(dict.fromkeys(origins)) or "a literal"
        if len(distinct) > 1:
            shown.origin = f"{len(distinct)} lengths, one program each: {shown.origin}"
        return shown

    def _value(self, node: ast.expr, function: _source.Function, site: _Site) -> Bound:
        """An expression in ``function``'s body, as it evaluated when ``site`` traced the entry function."""
        assert function.node is not None
        if isinstance(node, ast.Constant):
            return evaluate(node, {})
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        env: dict[str, Bound] = {}
        local = _source._locals(function.node)
        parameters = {a.arg for a in _source.parameters(function.node)}
        for name in names:
            if name in parameters:
                env[name] = self._parameter(name, function, site)
            elif name in local:
                env[name] = Bound(None, f"`{name}` is computed inside `{function.name}`")
            else:
                env[name] = self._global(name, function, site)
        return evaluate(node, env)

    def _parameter(self, name: str, function: _source.Function, site: _Site) -> Bound:
        assert function.node is not None
        default = _default(function.node, name)
        if function is self.entry or function.name == self.entry.name:
            passed = _argument(site.call, function.node, name) if site.call is not None else None
            if passed is not None:
                value = evaluate(passed, self.bindings.at(site.cell, site.line))
                if value.value is None:
                    return value
                how = "static argument" if function.static_args else "argument"
                return Bound(
                    value.value,
                    f"{how} `{name}` = {value.value} at the call in cell {site.cell + 1}, line "
                    f"{site.line}" + (f": {value.origin}" if value.origin != "a literal" else ""),
                )
            if site.call is None and function.static_args:
                return Bound(
                    None,
                    f"`{name}` may be a static argument of a call nbscope cannot see (cell {site.cell + 1} "
                    f"calls `{function.name}` through another function)",
                )
        elif any(_argument(call, function.node, name) is not None for call in self._inner_calls(function.name)):
            return Bound(None, f"`{name}` is passed to `{function.name}` by the code that calls it")
        if default is None:
            return Bound(None, f"`{name}` is a parameter of `{function.name}` without a default")
        value = evaluate(default, self.bindings.at(function.cell, function.line))
        if value.value is None:
            return Bound(None, f"the default `{name}={ast.unparse(default)}` of `{function.name}`: {value.origin}")
        bound_from = "" if value.origin == "a literal" else f": {value.origin}"
        return Bound(
            value.value,
            f"default `{name}={ast.unparse(default)}` = {value.value}, bound when cell "
            f"{function.cell + 1} ran the def{bound_from}",
        )

    def _global(self, name: str, function: _source.Function, site: _Site) -> Bound:
        env = self.bindings.at(site.cell, site.line) if site.call is not None else self.bindings.start(site.cell)
        if site.call is None and name in self.bindings.bound_in(site.cell):
            return Bound(None, f"`{name}` changes in cell {site.cell + 1}, which traces `{self.entry.name}` indirectly")
        value = env.get(name) or Bound(None, f"`{name}` is not assigned before cell {site.cell + 1}")
        if value.value is None:
            return value
        return Bound(
            value.value,
            f"global `{name}` = {value.value} when cell {site.cell + 1} traced `{self.entry.name}`: {value.origin}",
        )

    def _inner_calls(self, name: str) -> list[ast.Call]:
        found: list[ast.Call] = []
        for function in self.code.traced_by(self.entry.name, self.entry.cell):
            if function.node is not None and function.name != name:
                found += [
                    n
                    for n in ast.walk(function.node)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
                ]
        return found
