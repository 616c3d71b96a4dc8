"""Which cells' code may run JAX work, read from the notebook's sources.

What a forecast reads first is what ran (compile events, programs, XLA's work in the cell's trace); this
is for a cell whose trace was cut before it showed anything. It is generous, but reads the cells in the
order they ran: a name counts as JAX at a cell when what it is bound to there (its latest binding in an
earlier cell or in the cell itself) imports JAX (or a library built on it), or is a function or class whose
code refers to such a name, or a value that does. A name a later cell binds to JAX (a JAX rewrite of a NumPy
function, under the same name) does not make an earlier cell's call of the NumPy one JAX work. A binding
under ``if``, ``for``, ``while``, ``with`` or ``try`` adds to the name's earlier bindings instead of
replacing them (it may not have run). A cell whose code refers to a JAX name may run JAX work; a cell whose
code cannot be read is assumed to.
"""

from __future__ import annotations

import ast
import re
import typing
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping

from nbscope.analyse.diagnose._source import parse

# Libraries whose calls run JAX programs: importing any of them binds a JAX name.
JAX_PACKAGES = frozenset(
    {
        "jax",
        "jaxlib",
        "numpyro",
        "flax",
        "optax",
        "equinox",
        "diffrax",
        "blackjax",
        "chex",
        "jaxopt",
        "optimistix",
        "lineax",
        "haiku",
        "objax",
        "tensorflow_probability",
    }
)

# What a name is bound to: the import, the ``def`` / ``class``, or the value assigned (an expression).
Binding = ast.AST


def _names(node: ast.AST) -> set[str]:
    """The names ``node`` refers to; for a function, only those its body does not bind itself: a parameter or
    local ``x`` of a Numba or NumPy function is not the notebook's ``x = jnp.linspace(...)``."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return _free_names(node)
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _free_names(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Names a function reads from outside: what it (and what it nests) loads, less its parameters and the
    names assigned in it (Python makes those local), unless declared ``global`` or ``nonlocal``."""
    arguments = function.args
    parameters = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
    parameters |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
    body = function.body if isinstance(function.body, list) else [function.body]
    inner = [node for statement in body for node in ast.walk(statement)]
    declared = {name for node in inner if isinstance(node, (ast.Global, ast.Nonlocal)) for name in node.names}
    local = {n.id for n in inner if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    local |= {n.name for n in inner if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    local |= {
        (a.asname or a.name).split(".")[0]
        for n in inner
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    loads = {n.id for n in inner if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    # Decorators, defaults and annotations are read where the function is defined.
    outside = [
        *getattr(function, "decorator_list", []),
        *arguments.defaults,
        *(d for d in arguments.kw_defaults if d is not None),
    ]
    loads |= {n.id for node in outside for n in ast.walk(node) if isinstance(n, ast.Name)}
    return loads - ((parameters | local) - declared)


def _bound(target: ast.AST) -> set[str]:
    """Names an assignment target binds (``x``, ``a, b``, ``*rest``; not ``x.attr`` or ``x[i]``)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {name for element in target.elts for name in _bound(element)}
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    return set()


def _imports_jax(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in JAX_PACKAGES for a in node.names)
    return isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in JAX_PACKAGES


def _binds(node: ast.stmt, conditional: bool) -> Iterator[tuple[Iterable[str], Binding, bool]]:
    """What one statement binds itself: (names, the value they are bound to, whether under a condition)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield [node.name], node, conditional
    elif isinstance(node, ast.Import):
        for alias in node.names:
            yield [(alias.asname or alias.name).split(".")[0]], node, conditional
    elif isinstance(node, ast.ImportFrom):
        yield [alias.asname or alias.name for alias in node.names], node, conditional
    elif isinstance(node, ast.Assign):
        yield {name for target in node.targets for name in _bound(target)}, node.value, conditional
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        yield _bound(node.target), node.value, conditional
    elif isinstance(node, ast.AugAssign):
        yield _bound(node.target), node, True  # ``x += y``: x stays what it was, and takes y's part
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        yield _bound(node.target), node.iter, True
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        for item in node.items:
            if item.optional_vars is not None:
                yield _bound(item.optional_vars), item.context_expr, True


def _nested(node: ast.stmt) -> list[ast.stmt]:
    """The statements a compound statement holds, each run under a condition (a branch, loop, ``with``, ``try``
    or ``match``); none for a function or class, whose body binds names of its own."""
    if isinstance(node, (ast.For, ast.AsyncFor, ast.If, ast.While)):
        return node.body + node.orelse
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return node.body
    if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
        handlers = [s for h in getattr(node, "handlers", []) for s in h.body]
        return getattr(node, "body", []) + handlers + getattr(node, "orelse", []) + getattr(node, "finalbody", [])
    if isinstance(node, ast.Match):
        return [s for case in node.cases for s in case.body]
    return []


def _bindings(statement: ast.stmt) -> tuple[dict[str, list[Binding]], dict[str, list[Binding]]]:
    """What a cell's top-level statement binds (not inside a function or class): the names it binds for sure
    (they replace earlier bindings), and those it binds under a branch, loop, ``with`` or ``try`` (added)."""
    certain: dict[str, list[Binding]] = {}
    maybe: dict[str, list[Binding]] = {}

    def visit(statements: list[ast.stmt], conditional: bool) -> None:
        for node in statements:
            for names, value, under in _binds(node, conditional):
                for name in names:
                    (maybe if under else certain).setdefault(name, []).append(value)
            visit(_nested(node), True)
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for walrus in (n for n in ast.walk(node) if isinstance(n, ast.NamedExpr)):
                    maybe.setdefault(walrus.target.id, []).append(walrus.value)

    visit([statement], False)
    return certain, maybe


def _jax_names(namespace: Mapping[str, list[Binding]], names_of: dict[int, set[str]]) -> set[str]:
    """The names of ``namespace`` bound to JAX: imports of it, then what refers to those, until nothing more
    is found (a function may refer to a name bound after it). ``names_of``: each binding's names, by id."""

    def refers(binding: Binding, found: set[str]) -> bool:
        if isinstance(binding, (ast.Import, ast.ImportFrom)):
            return _imports_jax(binding)
        names = names_of.get(id(binding))
        if names is None:
            names = names_of[id(binding)] = _names(binding)
        return bool(names & found)

    found: set[str] = set()
    while True:
        grown = {name for name, bindings in namespace.items() if any(refers(b, found) for b in bindings)}
        if grown == found:
            return found
        found = grown


def cells_touching_jax(sources: Mapping[int, str]) -> set[int]:
    """Indices of the cells (among ``sources``, by code-cell index, run in that order) whose code may run
    JAX work; a cell whose code does not parse is counted in."""
    namespace: defaultdict[str, list[Binding]] = defaultdict(list)
    names_of: dict[int, set[str]] = {}  # the trees stay alive meanwhile (in ``namespace``), so ids stay theirs
    touching: set[int] = set()
    for index in sorted(sources):
        tree = _unwrapped(parse(sources[index]))
        if tree is None:
            touching.add(index)
            continue
        if any(_imports_jax(n) for n in ast.walk(tree)):
            touching.add(index)
        jax_names = _jax_names(namespace, names_of)
        for statement in tree.body:  # a name the cell rebinds before it uses it is what it rebinds it to
            used = _used(statement)
            before = jax_names
            certain, maybe = _bindings(statement)
            for name, bindings in certain.items():
                namespace[name] = list(bindings)
            for name, bindings in maybe.items():
                namespace[name] = [*namespace[name], *bindings]
            if certain or maybe:
                jax_names = _jax_names(namespace, names_of)
            if used & (before | jax_names):  # bound as it was, or as the statement binds it (a loop uses both)
                touching.add(index)
    return touching


# Magics that run the code they are given (``%time f(x)``, ``%%timeit -n 3`` over a cell): that code is the cell's.
CODE_MAGICS = frozenset({"time", "timeit", "capture", "prun", "memit", "debug"})
_MAGIC_OPTIONS = re.compile(r"^(?:\s*-[nr]\s*\d+|\s*-[a-zA-Z]\b)*\s*")


def _unwrapped(tree: ast.Module | None, depth: int = 0) -> ast.Module | None:
    """The cell's code with each magic that runs code (IPython turns ``%time y = f(x)`` into
    ``get_ipython().run_line_magic('time', 'y = f(x)')``) replaced by the code it runs."""
    if tree is None or depth > 3:
        return tree
    body: list[ast.stmt] = []
    for statement in tree.body:
        code = _magic_code(statement)
        inner = _unwrapped(parse(code), depth + 1) if code is not None else None
        body.extend(inner.body if inner is not None else [statement])
    tree.body = body
    return tree


def _magic_code(statement: ast.stmt) -> str | None:
    call = statement.value if isinstance(statement, (ast.Expr, ast.Assign)) else None
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in ("run_line_magic", "run_cell_magic")
        and len(call.args) >= 2
        and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args)
    ):
        return None
    name, code = typing.cast(str, call.args[0].value), typing.cast(str, call.args[-1].value)  # type: ignore[attr-defined]
    if name not in CODE_MAGICS:
        return None
    return code if call.func.attr == "run_cell_magic" else _MAGIC_OPTIONS.sub("", code, count=1)


def _used(statement: ast.stmt) -> set[str]:
    """The names a statement reads (``x += 1`` reads x too); a ``def`` reads what its body and decorators read
    from outside it (not its parameters or locals)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _free_names(statement)
    read: set[str] = set()
    pending: list[ast.AST] = [statement]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Lambda):
            read |= _free_names(node)
            continue
        if isinstance(node, ast.Name) and (isinstance(node.ctx, ast.Load) or isinstance(statement, ast.AugAssign)):
            read.add(node.id)
        pending.extend(ast.iter_child_nodes(node))
    return read
