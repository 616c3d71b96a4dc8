"""Which cells' code may run JAX work, read from the notebook's sources.

What a forecast reads first is what ran (compile events, programs, XLA's work in the cell's trace); this
is for a cell whose trace was cut before it showed anything. It is deliberately generous: a name counts
as JAX when it is bound by importing JAX (or a library built on it), by a function or class whose code
refers to such a name, or by an assignment whose value does, over the whole notebook until nothing more
is found. A cell whose code refers to any such name may run JAX work; a cell whose code cannot be read
is assumed to.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from nbscope.analyse.diagnose._source import parse

# Libraries whose calls run JAX programs: importing any of them binds a JAX name.
JAX_PACKAGES = frozenset({"jax", "jaxlib", "numpyro", "flax", "optax", "equinox", "diffrax", "blackjax", "chex",
                          "jaxopt", "optimistix", "lineax", "haiku", "objax", "tensorflow_probability"})


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _bound(target: ast.AST) -> set[str]:
    """Names an assignment target binds (``x``, ``a, b``, ``*rest``; not ``x.attr`` or ``x[i]``)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {name for element in target.elts for name in _bound(element)}
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    return set()


def _bindings(tree: ast.Module, jax_names: set[str]) -> set[str]:
    """The names ``tree`` binds to JAX, given the names already known to be JAX."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {(a.asname or a.name).split(".")[0] for a in node.names
                      if a.name.split(".")[0] in JAX_PACKAGES}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in JAX_PACKAGES:
            found |= {a.asname or a.name for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            pass  # judged below, as a whole
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            if _names(node.value) & jax_names:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found |= {name for target in targets for name in _bound(target)}
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and _names(node.iter) & jax_names:
            found |= _bound(node.target)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None and _names(item.context_expr) & jax_names:
                    found |= _bound(item.optional_vars)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _names(node) & jax_names:
            found.add(node.name)  # its body or decorators use JAX (``@jax.jit``, ``jnp.sum``)
    return found


def cells_touching_jax(sources: Mapping[int, str]) -> set[int]:
    """Indices of the cells (among ``sources``, by code-cell index) whose code may run JAX work; a cell
    whose code does not parse is counted in."""
    trees = {index: parse(source) for index, source in sources.items()}
    jax_names: set[str] = set()
    while True:  # a function may use a name a later cell binds: until nothing new is found
        grown = set(jax_names)
        for tree in trees.values():
            if tree is not None:
                grown |= _bindings(tree, grown)
        if grown == jax_names:
            break
        jax_names = grown
    return {index for index, tree in trees.items()
            if tree is None or _names(tree) & jax_names or _bindings(tree, set())}  # the last: it imports JAX
