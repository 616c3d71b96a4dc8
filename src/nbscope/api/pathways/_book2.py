"""The jupyter-book 2 pathway: a real ``jupyter-book build --execute`` of a temporary MyST project.

jupyter-book 2 (mystmd, Node.js) starts a Jupyter server, and the server a fresh kernel per page
through its sessions API; nbscope's probe reaches that kernel through the kernelspec copies on
``JUPYTER_PATH`` (``nbscope.api.trace.run_traced``), so the cells measured are the book's own
execution. Where the command comes from, and why the server runs with this interpreter, is in
``nbscope.api.jupyter_book2``.

The temporary project holds the notebook as its only page and a local stand-in for the site theme, so
the build needs no network (it would otherwise download the theme after executing, and fail offline);
it writes the site's content (``_build/site``) but no themed HTML. The book's own figure for its
execution is ``duration_ms`` in its execution cache entry (``_build/execute/<key>.ipynb``: from the
kernel's connection to the last cell's reply). Fixed costs kept apart from the cells:
``server_start_s`` (from the build log's "Starting new Jupyter server" to "Jupyter server started"),
``book_outside_execution_s`` (build wall minus that execution figure: Node start, parsing, server and
kernel start, writing the site, and ``exit_after_log_s``, the time from its last log line to its exit,
which after an execution is about 10 s of waiting) and ``execution_outside_cells_s`` (messaging inside
the execution).

jupyter-book 2 stops a page's execution at its first error (unless the cell is tagged
``raises-exception``) and has no per-cell time limit: with ``--timeout`` the whole build gets
``timeout`` × cells + a margin, and a cell cut off there is reported as a timeout.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from nbscope.api import jupyter_book2
from nbscope.api.pathways._book import _link_siblings, build_and_measure
from nbscope.api.pathways._common import PathwayOptions, PathwayResult, reap, skipped
from nbscope.collect.notebook import Notebook

if TYPE_CHECKING:
    from nbscope.api.trace import TraceResult

# Added to the build's time limit (per-cell limit × cells): Node and server start, parsing, writing.
BUILD_MARGIN_S = 300.0
TIMED_OUT = "ran past its"  # what nbscope.api.trace adds to a command's output when it stopped it


def write_project(notebook: Path, project: Path) -> dict[str, object]:
    """A minimal jupyter-book 2 project whose only page is the notebook; returns its settings."""
    linked = _link_siblings(notebook, project)
    shutil.copyfile(notebook, project / notebook.name)
    config = {
        "version": 1,
        "project": {"title": "nbscope pathways", "toc": [{"file": notebook.name}]},
        "site": {"template": "book-theme"},
    }
    # JSON is YAML: no YAML writer needed, and names with odd characters stay quoted.
    (project / "myst.yml").write_text(json.dumps(config, indent=1), encoding="utf-8")
    jupyter_book2.write_theme_stand_in(project)
    return {"linked_siblings": len(linked), "execute": {"execute": True, "theme": "local stand-in (offline)"}}


def book2_figures(result: TraceResult, project: Path) -> dict[str, object]:
    """The book's own figures: its execution time from the cache entry, server start from the log."""
    log = result.book2 or jupyter_book2.read_build_log(result.timed_output)
    executed = None
    for entry in sorted((project / "_build" / "execute").glob("*.ipynb")):
        try:
            context = json.loads(entry.read_text(encoding="utf-8"))["metadata"]["mystContext"]
            executed = float(context["duration_ms"]) / 1000.0
        except (OSError, ValueError, KeyError, TypeError):
            continue
    figures: dict[str, object] = {
        "executed_s": executed,
        "execution_failed": None,
        "executed_from": "execution cache duration_ms" if executed is not None else None,
        "halted_at_error": bool(log.halted),
        "overheads": {"server_start_s": log.server_start_s, "exit_after_log_s": _exit_after_log(result)},
    }
    if log.halted:
        figures["execution_failed"] = "CellExecutionError"  # it stopped at the page's first error
    if TIMED_OUT in result.output:
        figures["execution_failed"] = "CellTimeoutError"
        figures["timeout_message"] = (
            "jupyter-book 2 has no per-cell limit: nbscope stopped the build at --timeout × cells"
        )
    if log.server_failed:
        figures["execution_failed"] = "JupyterServerError"
    return figures


def _exit_after_log(result: TraceResult) -> float | None:
    """How long the build ran after its last log line (jupyter-book 2 lingers there after executing)."""
    if not result.timed_output:
        return None
    return max(0.0, result.wall_s - result.timed_output[-1][0])


def run_book2(notebook: Notebook, options: PathwayOptions, *, fingerprint: dict[str, object]) -> PathwayResult:
    """Build a temporary jupyter-book 2 project of the notebook and measure the book's own execution."""
    found = jupyter_book2.find()
    if not found.usable:
        return skipped("book2", found.problem or "jupyter-book 2 is not available")
    source = notebook.path.resolve()
    root = Path(tempfile.mkdtemp(prefix="nbscope-book2-"))
    try:
        project = root / "book"
        project.mkdir()
        settings = write_project(source, project)
        settings["jupyter_book2_origin"] = found.origin
        # The server jupyter-book 2 starts is `python -m jupyter_server` with the first python on PATH.
        env = {"PATH": jupyter_book2.interpreter_first(root / "bin")}
        limit = options.timeout * max(1, len(notebook.code_cells)) + BUILD_MARGIN_S if options.timeout else None
        command = [*found.command, "build", "--execute"]
        return build_and_measure(
            "book2",
            command,
            source,
            project,
            options,
            fingerprint,
            found.version,
            settings,
            book2_figures,
            env=env,
            timeout=limit,
        )
    finally:
        reap(options.token)
        shutil.rmtree(root, ignore_errors=True)
