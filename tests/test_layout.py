"""The package's layout: stages in order, no import from a later stage, every module says what it is for."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "nbscope"
# The pipeline's stages in order; ``schema`` (the typed model of a record, its writers and codec) is the bottom,
# so the collector can build what every later stage reads; ``api`` (runs jobs) and ``render`` (formats results)
# both sit after the analysis and never import each other; the CLI is the face over all of them.
STAGES = {"schema": 1, "collect": 2, "record": 3, "analyse": 4, "api": 5, "render": 5, "cli": 6}
# The one top-level module the schema may use: it shares the units' readers of a number.
# (and ``nbscope._redact``, standard library only: an error message quoting a record's value is redacted, then cut)
SCHEMA_MAY_IMPORT = {"nbscope._units", "nbscope._redact"}
# The CLI's own shared pieces; other CLI modules never import each other (the package itself imports
# each command module once, to register it).
CLI_SHARED = {"nbscope.cli", "nbscope.cli._options", "nbscope.cli._after_run", "nbscope.cli._fast"}
# ``python -m nbscope`` is the CLI's second door.
ENTRY_POINTS = {"nbscope.__main__"}


def modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.append((".".join(parts), path))
    return found


def stage(module: str) -> tuple[str, int]:
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in STAGES:
        return "base", 0
    return parts[1], STAGES[parts[1]]


def imports(module: str, path: Path, skip: list[ast.If] | None = None) -> set[str]:
    """What the module imports (leaving out the lines of the ``skip`` blocks)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    skipped = {line for block in skip or [] for line in range(block.lineno, (block.end_lineno or 0) + 1)}
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return {n for n in names if n == "nbscope" or n.startswith("nbscope.")}


def type_only_imports(module: str, path: Path) -> set[str]:
    """What the module imports inside ``if TYPE_CHECKING:`` only (names for annotations, never loaded)."""
    tree = ast.parse(path.read_text(), str(path))
    guarded = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
    ]
    found: set[str] = set()
    for block in guarded:
        for node in block.body:
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
    loaded = imports(module, path, skip=guarded)
    return {name for name in found if name.startswith("nbscope.")} - loaded


# A renderer formats what a job returned: it names the job's outcome types in its annotations (imported under
# ``if TYPE_CHECKING:``), and never loads the api stage.
TYPES_ONLY = {("render", "api")}


def known(name: str, all_modules: set[str]) -> str | None:
    """The module an imported name refers to (``from a import b`` may name a function of ``a``)."""
    while name and name not in all_modules:
        name = name.rpartition(".")[0]
    return name or None


def test_the_top_level_shows_the_stages() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert set(STAGES) <= folders
    loose = {p.name for p in PACKAGE.glob("*.py")}
    # Infrastructure every stage may use: errors, units, signal handling, process clean-up, files, redaction.
    assert loose <= {
        "__init__.py",
        "__main__.py",
        "_errors.py",
        "_version.py",
        "_units.py",
        "_signals.py",
        "_processes.py",
        "_files.py",
        "_redact.py",
    }


@pytest.mark.parametrize(("module", "path"), modules(), ids=[m for m, _ in modules()])
def test_no_import_from_a_later_stage(module: str, path: Path) -> None:
    all_modules = {m for m, _ in modules()}
    own_name, own = stage(module)
    if module in ENTRY_POINTS:
        return
    bad = []
    type_only = type_only_imports(module, path)
    for name in imports(module, path):
        target = known(name, all_modules)
        if target is None or target == "nbscope":
            continue
        their_name, theirs = stage(target)
        if (own_name, their_name) in TYPES_ONLY and name in type_only:
            continue
        if theirs > own or (theirs == own and their_name != own_name):
            bad.append(target)
        elif own_name == their_name == "cli" and target not in CLI_SHARED and module != "nbscope.cli":
            bad.append(target)
    assert not bad, f"{module} ({own_name}) imports {sorted(set(bad))}"


# What the command line may import: it parses options, calls one API function and renders what that returns,
# so it reaches the stages below only through the API (errors and file rules included: nbscope.api,
# nbscope.api.files) and the renderers, besides its own modules and the package's version (``nbscope``).
CLI_MAY_IMPORT = ("nbscope.api", "nbscope.render", "nbscope.cli")
# The one exception, and why: the session installs the stop signals' handlers for the length of a command and
# reads what they noted (the signal, the partial runs saved) for the exit code and the closing line; that is
# the process's state, which the CLI owns, and not a job the API runs.
CLI_ALSO_MAY_IMPORT = {"nbscope.cli._session": ("nbscope._signals",)}


@pytest.mark.parametrize(
    ("module", "path"),
    [m for m in modules() if m[0].startswith("nbscope.cli")],
    ids=[m for m, _ in modules() if m.startswith("nbscope.cli")],
)
def test_the_command_line_imports_only_the_api_and_the_renderers(module: str, path: Path) -> None:
    all_modules = {m for m, _ in modules()}
    reached = {known(name, all_modules) for name in imports(module, path)} - {None, "nbscope"}
    allowed = CLI_MAY_IMPORT + CLI_ALSO_MAY_IMPORT.get(module, ())
    bad = sorted(
        str(t) for t in reached if not (str(t) in allowed or str(t).startswith(tuple(f"{a}." for a in allowed)))
    )
    assert not bad, f"{module} imports {bad}: go through nbscope.api"


@pytest.mark.parametrize(
    ("module", "path"),
    [(m, p) for m, p in modules() if stage(m)[0] == "schema"],
    ids=[m for m, _ in modules() if stage(m)[0] == "schema"],
)
def test_the_schema_imports_only_the_units_and_itself(module: str, path: Path) -> None:
    outside = {
        name
        for name in imports(module, path)
        if name not in SCHEMA_MAY_IMPORT
        and not name.startswith(("nbscope.schema", "nbscope._units.", "nbscope._redact."))
    }
    assert not outside, f"{module} imports {sorted(outside)}: the schema stands on nothing but nbscope._units"


@pytest.mark.parametrize(("module", "path"), modules(), ids=[m for m, _ in modules()])
def test_every_module_says_what_it_is_for(module: str, path: Path) -> None:
    if path.name == "__main__.py" or path.name == "_version.py":
        return
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    assert docstring and len(docstring.splitlines()[0]) > 10, f"{module} has no docstring saying what it is for"


def _import_graph() -> dict[str, set[str]]:
    """Module → the nbscope modules it imports, at module level or inside functions (an import inside a function
    hides a circle from Python at start-up, not from the design). ``from package import module`` is an edge to
    the module only: a module's own package is always being imported already."""
    all_modules = {m for m, _ in modules()}
    graph: dict[str, set[str]] = {}
    for module, path in modules():
        edges = set()
        for name in imports(module, path):
            target = known(name, all_modules)
            if target is None or target == module or module.startswith(target + "."):
                continue
            if name != target and f"{name}" in all_modules:
                target = name
            edges.add(target)
        graph[module] = edges
    for module, edges in graph.items():
        # ``from a import b`` also names ``a``; when ``b`` is a module of ``a``, only ``b`` is the import.
        graph[module] = {e for e in edges if not any(o.startswith(e + ".") for o in edges)}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles_even_through_imports_inside_functions() -> None:
    circles = _circles(_import_graph())
    assert not circles, "import circles: " + "; ".join(" → ".join(c) for c in circles)


def test_the_circle_finder_finds_a_circle_hidden_in_a_function() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


# The mypy baseline (.ci/mypy-baseline.txt) started at 99 errors (issue 36); it may only shrink. Lower this
# number whenever the baseline shrinks, so that no later change can grow it back. mypy runs in strict mode since
# issue 50 (75 strict errors then): the 14 left are in the in-kernel probe and the document validation.
MYPY_BASELINE_MOST = 14


def test_the_mypy_baseline_only_shrinks() -> None:
    baseline = Path(__file__).resolve().parents[1] / ".ci" / "mypy-baseline.txt"
    entries = [line for line in baseline.read_text().splitlines() if line.strip()]
    assert len(entries) <= MYPY_BASELINE_MOST, f"{len(entries)} known mypy errors; the baseline may only shrink"
    assert all(line.startswith("src/nbscope/") for line in entries), "baseline entries name files under src/"


# Functions over 80 lines and over complexity 15 (``ruff --select C901``), issue 50: 11 and 13 at 3518054, 23 and 13
# once the tree was formatted; these counts may only shrink.
LONG_FUNCTIONS_MOST = 7
COMPLEX_FUNCTIONS_MOST = 7


def _long_functions() -> list[str]:
    found = []
    for module, path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (node.end_lineno or start) - start + 1 > 80:
                    found.append(f"{module}.{node.name}")
    return found


def test_long_and_complex_functions_only_shrink() -> None:
    import subprocess
    import sys

    long = _long_functions()
    assert len(long) <= LONG_FUNCTIONS_MOST, f"{len(long)} functions over 80 lines (may only shrink): {long}"
    run = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "C901", "--config", "lint.mccabe.max-complexity=15"]
        + ["--output-format", "concise", "--no-cache", str(PACKAGE)],
        capture_output=True,
        text=True,
        check=False,
    )
    complex_ = [line for line in run.stdout.splitlines() if " C901 " in line]
    assert run.returncode in (0, 1) and (complex_ or run.returncode == 0), run.stderr
    assert len(complex_) <= COMPLEX_FUNCTIONS_MOST, f"{len(complex_)} functions over complexity 15: {complex_}"


# Parameters typed ``Any`` in src/ (379 at issue 36's start; the target is 100 or fewer). The count may only
# shrink: lower this number whenever it does, so that no later change can grow it back.
ANY_PARAMETERS_MOST = 69


def _any_parameters() -> list[str]:
    found = []
    for module, path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            given = node.args
            for arg in [*given.posonlyargs, *given.args, *given.kwonlyargs, *filter(None, [given.vararg, given.kwarg])]:
                if arg.annotation is not None and ast.unparse(arg.annotation).strip("'\"") in ("Any", "typing.Any"):
                    found.append(f"{module}.{node.name}({arg.arg})")
    return found


# Records still typed Any: the probe's (a logging record).
UNTYPED_STORES_AND_RECORDS = {"nbscope.collect.probe._nbscope_probe.keep(record)"}


def test_any_typed_parameters_only_shrink() -> None:
    found = _any_parameters()
    assert len(found) <= ANY_PARAMETERS_MOST, f"{len(found)} parameters typed Any; the count may only shrink"
    untyped = {name for name in found if name.endswith(("(store)", "(record)"))}
    assert untyped <= UNTYPED_STORES_AND_RECORDS, (
        f"type these as Store or RunRecord: {sorted(untyped - UNTYPED_STORES_AND_RECORDS)}"
    )


# Untyped reads are counted by type, not by spelling: `.ci/any_lines.py` (run by `.ci/run`) holds the lines where
# mypy types an expression Any under a ceiling that may only fall. A typed lookup is spelled `.get`; the
# spelled-around form `d[k] if k in d else default` (which a text count of `.get(` once rewarded) stays rare.
SPELLED_AROUND_MOST = 6
# A class's own writer or reader of its document, which the codec (schema/codec.py) now writes and reads.
SERIALISING_METHODS = {
    "parse",
    "from_dict",
    "from_json",
    "to_dict",
    "as_dict",
    "as_json",
    "to_json",
    "from_row",
    "to_row",
    "from_document",
    "to_document",
}
SERIALISING_LINES_MOST = 31  # statements (69 lines before the tree was formatted)


def _spelled_around_lookups() -> list[str]:
    """Each `d[k] if k in d else ...`: the key looked up is the key tested, in the mapping tested."""
    found = []
    for module, path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.IfExp) and isinstance(node.test, ast.Compare)):
                continue
            test, body = node.test, node.body
            if (
                isinstance(test.ops[0], ast.In)
                and isinstance(body, ast.Subscript)
                and ast.dump(body.value) == ast.dump(test.comparators[0])
                and ast.dump(body.slice) == ast.dump(test.left)
            ):
                found.append(f"{module}:{node.lineno}")
    return found


def _serialising_lines() -> dict[str, int]:
    found: dict[str, int] = {}
    for module, path in modules():
        if module == "nbscope.schema.codec":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for method in node.body:
                    if isinstance(method, ast.FunctionDef) and method.name in SERIALISING_METHODS:
                        name = f"{module}.{node.name}.{method.name}"
                        # statements, not lines: a count the formatter cannot change
                        found[name] = sum(isinstance(n, ast.stmt) for n in ast.walk(method))
    return found


def test_typed_lookups_are_spelled_get() -> None:
    found = _spelled_around_lookups()
    assert len(found) <= SPELLED_AROUND_MOST, f"spell these typed lookups with .get: {found}"


def test_hand_written_serialisation_only_shrinks() -> None:
    found = _serialising_lines()
    assert sum(found.values()) <= SERIALISING_LINES_MOST, f"{sum(found.values())} statements in {sorted(found)}"


def test_the_counters_see_what_they_count() -> None:
    # The counters must find what they count, or the two tests above could never fail.
    assert _spelled_around_lookups() and "nbscope.record.run.RunRecord.from_dict" in _serialising_lines()


def test_the_types_only_rule_tells_a_guarded_import_from_a_loaded_one(tmp_path: Path) -> None:
    """A renderer may name an api type under ``if TYPE_CHECKING:``; an import that loads the api is still found."""
    guarded = tmp_path / "guarded.py"
    guarded.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from nbscope.api.live import RunningKernel\n"
    )
    assert type_only_imports("nbscope.render.guarded", guarded) == {
        "nbscope.api.live",
        "nbscope.api.live.RunningKernel",
    }
    loaded = tmp_path / "loaded.py"
    loaded.write_text("from nbscope.api.live import RunningKernel\n")
    assert type_only_imports("nbscope.render.loaded", loaded) == set()
    assert "nbscope.api.live" in imports("nbscope.render.loaded", loaded)
