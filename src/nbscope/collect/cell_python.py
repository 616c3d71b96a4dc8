"""A notebook cell as the Python its statements run: IPython's timing magics (``%time x = f(n)``, ``%%time``,
``%timeit``) run their statement in the notebook's namespace, so its assignments and calls are the cell's own;
other magics and shell lines (``!pip``) run no Python of the cell's. Read by the diagnosis (what a cell binds and
calls) and by ``nbscope try`` (what a remedy applies to, and which values it compares)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

TIMING_MAGICS = ("time", "timeit", "prun", "capture")


def timeit_statement(argument: str) -> str:
    """The statement of a ``%timeit -n 3 -r 1 f(x)`` line, without its options."""
    tokens = argument.strip().split()
    takes_value = {"-n", "-r", "-p", "-u"}
    i = 0
    while i < len(tokens) and tokens[i].startswith("-"):
        i += 2 if tokens[i] in takes_value else 1
    return " ".join(tokens[i:])


def python_of(source: str) -> ast.Module | None:
    """The cell's statements, parsed with their line numbers kept; None: a cell magic that is not Python (``%%bash``,
    ``%%writefile``), or code that does not parse."""
    lines = source.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        magic = lines[first].lstrip()[2:].split(maxsplit=1)[0] if lines[first].strip() != "%%" else ""
        if magic not in TIMING_MAGICS:
            return None
        lines[first] = ""
    for number, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith("%"):
            name, _, rest = stripped[1:].partition(" ")
            if name in TIMING_MAGICS and rest.strip():
                statement = timeit_statement(rest) if name == "timeit" else rest.strip()
                lines[number] = line[: len(line) - len(stripped)] + statement
            else:
                lines[number] = ""
        elif stripped.startswith("!"):
            lines[number] = ""
    try:
        return ast.parse("\n".join(lines))
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # a hostile cell is code nbscope cannot read
        return None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def in_source_order(node: ast.AST, *, into_scopes: bool = True) -> Iterator[ast.AST]:
    """``node`` and everything under it, depth first, in the order the source reads (``ast.walk`` goes level by level:
    a later statement in a branch comes before an earlier one nested deeper). ``into_scopes`` False: a function's or
    class's body is passed over (its names are its own), the definition itself still given."""
    yield node
    if into_scopes or not isinstance(node, _SCOPES):
        for child in ast.iter_child_nodes(node):
            yield from in_source_order(child, into_scopes=into_scopes)
