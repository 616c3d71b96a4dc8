"""The book pathways: a real jupyter-book build of a temporary book holding the notebook.

jupyter-book 1 (Sphinx + myst-nb) executes the notebook itself, through jupyter-cache and nbclient;
nbscope only injects its probe into the kernel the book starts (``nbscope.api.trace.run_traced``), so the
cells measured are the book's own execution, not a re-run. The book reports one figure of its own,
the log line ``Executed notebook in X seconds``; the build's wall time minus that figure is the book's
fixed cost outside execution (Sphinx start-up, reading, writing HTML).

jupyter-book 2 is a different program (mystmd, Node.js) under the same PyPI name: its pathway is
``_book2.py``, which builds through :func:`build_and_measure` here too.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbscope._redact import shorten
from nbscope.api.jupyter_book2 import major, this_environment_version
from nbscope.api.pathways._common import PathwayOptions, PathwayResult, kernel_described, one_line, reap, skipped
from nbscope.collect.notebook import Notebook
from nbscope.record.run import object_in, objects_in

if TYPE_CHECKING:
    from nbscope.api.trace import TraceResult
    from nbscope.schema.model import NotebookRun

EXECUTED = re.compile(r"Executed notebook in ([0-9]+(?:\.[0-9]+)?) seconds")
FAILED = re.compile(r"Executing notebook failed: ?([^\s\[]*)")
# Never linked into the temporary book: they would change its configuration or cost a long walk.
NOT_LINKED = {"_config.yml", "_toc.yml", "conf.py", "myst.yml", "_build", "node_modules", "__pycache__", "venv"}
NO_TIMEOUT = -1  # jupyter-book's value for "no per-cell limit"


def _executable(name: str) -> str | None:
    # Prefer the one installed beside this interpreter: same environment as the other pathways.
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def _link_siblings(notebook: Path, book: Path) -> list[str]:
    """Link the notebook's neighbours into the book, so relative paths (data files) still resolve.

    myst-nb runs the kernel in the page's folder, which is the temporary book, not the notebook's own
    folder as in the other pathways. Hidden entries and build folders are left out.
    """
    linked = []
    for entry in sorted(notebook.parent.iterdir()):
        if entry.name == notebook.name or entry.name.startswith(".") or entry.name in NOT_LINKED:
            continue
        try:
            (book / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
        except OSError:
            continue
        linked.append(entry.name)
    return linked


def write_book(notebook: Path, book: Path, timeout: float | None) -> dict[str, object]:
    """A minimal jupyter-book 1 project whose only page is the notebook; returns its settings."""
    linked = _link_siblings(notebook, book)
    shutil.copyfile(notebook, book / notebook.name)
    config: dict[str, object] = {
        "title": "nbscope pathways",
        # Only the notebook is a page: linked neighbours (other notebooks) are neither read nor run.
        "only_build_toc_files": True,
        "exclude_patterns": [*linked, *(f"{name}/**" for name in linked)],
        "execute": {
            # A clean build with forced execution, the nbclient path of a book build.
            "execute_notebooks": "force",
            "timeout": int(timeout) if timeout else NO_TIMEOUT,
            # As `nbscope profile` does: a failing cell does not stop the cells after it.
            "allow_errors": True,
        },
    }
    # JSON is YAML: no YAML writer needed, and names with odd characters stay quoted.
    (book / "_config.yml").write_text(json.dumps(config, indent=1), encoding="utf-8")
    (book / "_toc.yml").write_text(json.dumps({"format": "jb-book", "root": notebook.stem}, indent=1), encoding="utf-8")
    return {"execute": config["execute"], "linked_siblings": len(linked)}


def run_book(notebook: Notebook, options: PathwayOptions, *, fingerprint: dict[str, object]) -> PathwayResult:
    """Build a temporary jupyter-book 1 book of the notebook and measure the book's own execution."""
    version = this_environment_version()
    if version is None:
        return skipped("book", "jupyter-book is not installed (pip install 'jupyter-book<2')")
    if major(version) != 1:
        return skipped("book", f"jupyter-book {version} is jupyter-book 2 (mystmd); see --via book2")
    executable = _executable("jupyter-book")
    if executable is None:
        return skipped("book", f"jupyter-book {version} is installed but its command is not on PATH")
    source = notebook.path.resolve()
    root = Path(tempfile.mkdtemp(prefix="nbscope-book-"))
    try:
        settings = write_book(source, root, options.timeout)
        command = [executable, "build", "--all", str(root)]
        return build_and_measure("book", command, source, root, options, fingerprint, version, settings, book1_figures)
    finally:
        reap(options.token)
        shutil.rmtree(root, ignore_errors=True)


def book1_figures(result: TraceResult, root: Path) -> dict[str, object]:
    """What jupyter-book 1 says of its own execution: ``Executed notebook in X seconds`` (or its failure)."""
    executed = [float(m) for m in EXECUTED.findall(result.output)]
    failed = FAILED.findall(result.output)
    return {"executed_s": executed[-1] if executed else None, "execution_failed": failed[-1] if failed else None}


def _mark_timeouts(cells: list[dict[str, object]], run: NotebookRun, message: str) -> None:
    """The cells nbclient stopped at the book's timeout, recorded as ``timeout``."""
    for cell, measured in zip(cells, run.cells, strict=True):
        # nbclient interrupts the kernel at the timeout: the probe saw a KeyboardInterrupt (or, if the
        # kernel did not survive, a cell that started and never finished).
        interrupted = (
            measured.status == "error" and measured.error is not None and measured.error.name == "KeyboardInterrupt"
        )
        if interrupted or measured.status == "kernel-died":
            cell["status"] = "timeout"
            cell["error"] = {"name": "CellTimeoutError", "message": message}


def _overheads(build_s: float, executed_s: float | None, cell_wall: float, own: dict[str, object]) -> dict[str, object]:
    """The book's fixed costs: its build, its execution, and what lies outside the cells (when the book says
    how long its execution took; else the build less the cells)."""
    overheads: dict[str, object] = {"book_build_s": build_s, "book_executed_s": executed_s, **own}
    if executed_s is not None:
        overheads["book_outside_execution_s"] = max(0.0, build_s - executed_s)
        # Inside the book's execution but outside cells: kernel start and shutdown, messaging.
        overheads["execution_outside_cells_s"] = max(0.0, executed_s - cell_wall)
    else:
        # No figure from the book (a failed execution): the cells stand for execution.
        overheads["book_outside_execution_s"] = max(0.0, build_s - cell_wall)
        overheads["book_outside_execution_basis"] = (
            "build wall minus the cells' walls (the book reported no execution time)"
        )
    return overheads


def build_and_measure(
    name: str,
    command: list[str],
    source: Path,
    root: Path,
    options: PathwayOptions,
    fingerprint: dict[str, object],
    version: str | None,
    settings: dict[str, object],
    book_figures: Callable[[TraceResult, Path], dict[str, object]],
    *,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> PathwayResult:
    """Run a book build with the probe injected and turn its kernel's cells and the book's own figures
    (``book_figures``: ``executed_s``, ``execution_failed``, and fixed costs of its own under ``overheads``)
    into a pathway result."""
    from nbscope.api.trace import run_traced

    result = run_traced(
        command,
        sources=[source],
        cwd=root,
        env={**options.process_env(), **(env or {})},
        echo=False,
        fingerprint=fingerprint,
        timeout=timeout,
    )
    runner: dict[str, Any] = {
        "pathway": name,
        "command": [Path(command[0]).name, *command[1:-1], "<temporary book>"]
        if name == "book"
        else [Path(command[0]).name, *command[1:]],
        "jupyter_book_version": version,
        "returncode": result.returncode,
        "build_s": result.wall_s,
        **settings,
    }
    figures = book_figures(result, root)
    own_overheads = object_in(figures, "overheads")
    figures.pop("overheads", None)
    runner.update(figures)
    if not result.records:
        reason = (
            "stopped before a kernel it started ran a cell"
            if result.interrupted
            else f"{command[0]} exited {result.returncode}; no kernel it started ran the notebook's cells: "
            f"{one_line(result.output)}"
        )
        return PathwayResult(
            name,
            "error",
            runner=runner | {"output_tail": shorten(result.output, 2000, keep_end=True)},
            error=reason,
            interrupted=result.interrupted,
        )
    record = result.records[0]
    m = record.measurements
    run = record.notebook_run()
    # Which kernel the cells came from: one the book started, in the book's folder (not a re-run).
    runner["kernel"] = kernel_described(run)
    cells = objects_in(m, "cells")
    if runner["execution_failed"] == "CellTimeoutError":  # book_figures always says (as it says executed_s)
        message = runner.pop("timeout_message", None) or f"cell exceeded --timeout {options.timeout:g} s"
        _mark_timeouts(cells, run, message)
    cell_wall = sum(c.wall_s for c in run.cells if c.wall_s is not None)
    overheads = _overheads(result.wall_s, runner["executed_s"], cell_wall, own_overheads)
    status = record.status
    if result.interrupted:
        runner["interrupted"] = run.runner.interrupted
    if result.returncode != 0 or runner["execution_failed"] or result.interrupted:
        status = "partial"
        runner["output_tail"] = shorten(result.output, 2000, keep_end=True)
    result_totals = dict(object_in(m, "totals"))  # a trace record always holds its totals
    result_totals.update(book_build_s=result.wall_s, book_executed_s=runner["executed_s"])
    return PathwayResult(
        name,
        status,
        cells=cells,
        totals=result_totals,
        runner=runner,
        overheads=overheads,
        interrupted=result.interrupted,
    )
