"""mystmd (`myst build --execute`) traced per cell: two small lectures built in parallel, a cell over
``--cell-timeout`` stopped and recorded as ``timeout`` while everything else is kept, and ``runs --live``
naming the cell that runs meanwhile.

The build needs Node.js and mystmd: the fixture finds ``myst`` (PATH, ``NBSCOPE_MYST`` or nbscope's own
folder) or installs it with npm as ``nbscope book2-env --install`` does, and skips with the reason only when
that fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nbscope.api import jupyter_book2
from nbscope.collect import notebook as notebook_module
from test_book2 import found_or_installed

BOOK = Path(__file__).resolve().parent / "files" / "myst_book"
JAX_PAGE, NUMPY_PAGE = "jax_intro.md", "numpy_vs_numba_vs_jax.md"
# The second page's third cell sleeps 60 s; the first page's `import jax` must stay well under the limit even
# on a loaded 2-core machine (it took 8 s here with ten processes running).
CELL_TIMEOUT_S = 12


@pytest.fixture(scope="module")
def myst() -> jupyter_book2.Myst:
    if shutil.which("node") is None:
        pytest.skip("Node.js is not installed: mystmd cannot run here")
    return found_or_installed(jupyter_book2.find_myst, jupyter_book2.install_myst, "mystmd")


def _span(cell: dict[str, Any]) -> tuple[float, float]:
    return cell["started_unix"], cell["started_unix"] + cell["wall_s"]


@pytest.mark.slow
def test_a_traced_myst_build_stops_a_cell_over_the_cell_timeout_and_keeps_the_rest(
    myst: jupyter_book2.Myst, tmp_path: Path, run_cli: Any
) -> None:
    book = tmp_path / "book"
    shutil.copytree(BOOK, book)
    running = tmp_path / "running"
    env = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"}
    env["PATH"] = os.pathsep.join([str(myst.path_folder), env.get("PATH", "")])
    env["NBSCOPE_RUNNING_DIR"] = str(running)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nbscope",
            "trace",
            "--db",
            str(tmp_path / "nbscope.db"),
            "--json",
            "--cell-timeout",
            str(CELL_TIMEOUT_S),
            "--theme-stand-in",  # offline: the site template's stand-in
            "--",
            "myst",
            "build",
            "--execute",
            "--execute-parallel",
            "2",
        ],
        cwd=book,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # While the sleeping cell runs, `runs --live` names it (its number, line and first line).
        live: list[dict[str, Any]] = []
        deadline = time.monotonic() + 240
        while process.poll() is None and time.monotonic() < deadline:
            shown = run_cli("runs", "--live", "--json", env={"NBSCOPE_RUNNING_DIR": str(running)})
            live = [k for k in json.loads(shown.stdout) if k["first_line"] == "time.sleep(60)"]
            if live:
                break
            time.sleep(0.2)
        stdout, stderr = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
    assert live, f"runs --live never showed the sleeping cell: {stderr[-2000:]}"
    assert live[0]["kind"] == "trace" and Path(live[0]["notebook"]).name == NUMPY_PAGE
    sleeping = notebook_module.read(book / NUMPY_PAGE).code_cells[2]
    assert live[0]["cell"] == 3 and live[0]["line"] == sleeping.line
    assert 0 <= live[0]["elapsed_s"] <= CELL_TIMEOUT_S + 5

    # A cell timed out: trace exits 1 (as for a failing cell), every page measured is stored.
    assert process.returncode == 1, stderr[-3000:]
    records = {r["target"]: r for r in json.loads(stdout)}
    assert sorted(records) == [JAX_PAGE, NUMPY_PAGE]
    for page, record in records.items():
        source = notebook_module.read(book / page)
        assert [c["source_hash"] for c in record["measurements"]["cells"]] == [c.source_hash for c in source.code_cells]
    jax_cells = records[JAX_PAGE]["measurements"]["cells"]
    assert records[JAX_PAGE]["status"] == "ok" and all(c["status"] == "ok" for c in jax_cells)
    numpy_cells = records[NUMPY_PAGE]["measurements"]["cells"]
    assert records[NUMPY_PAGE]["status"] == "partial"
    assert [c["status"] for c in numpy_cells] == ["ok", "ok", "timeout", "not-run"]  # mystmd halts the page
    stopped = numpy_cells[2]
    assert stopped["error"]["name"] == "CellTimeoutError"
    assert CELL_TIMEOUT_S <= stopped["wall_s"] < 60  # stopped near the limit, long before the sleep's end
    assert records[NUMPY_PAGE]["settings"]["cell_timeout"] == CELL_TIMEOUT_S
    # --execute-parallel 2: the JAX page's kernel ran while the other page slept (one after the other, it
    # would have finished before that page began, or begun after it ended).
    sleep_start, sleep_end = _span(stopped)
    assert any(start < sleep_end and end > sleep_start for start, end in map(_span, jax_cells))
    assert not list(running.glob("*.json"))  # the run's announcement went with it
    assert not (book / "_build" / "templates").exists()  # the stand-in went too


def test_trace_myst_without_mystmd_says_how_to_install_it(run_cli: Any, tmp_path: Path) -> None:
    if shutil.which("myst"):
        pytest.skip("mystmd is on PATH")
    done = run_cli(
        "trace",
        "--db",
        tmp_path / "nbscope.db",
        "--",
        "myst",
        "build",
        "--execute",
        env={"NBSCOPE_CACHE_DIR": str(tmp_path / "cache"), "NBSCOPE_MYST": None},
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "nbscope book2-env --install" in done.stderr and str(tmp_path / "cache" / "mystmd") in done.stderr


def test_the_theme_stand_in_goes_only_where_no_theme_is_and_leaves_only_what_was_there(tmp_path: Path) -> None:
    from nbscope.api.trace import _remove_made, _write_theme_stand_in

    book = tmp_path / "book"
    shutil.copytree(BOOK, book)
    (book / "_build" / "site").mkdir(parents=True)  # the user's earlier build output
    made = _write_theme_stand_in(book)
    assert (book / jupyter_book2.THEME_FOLDER / "template.yml").read_text() == jupyter_book2.THEME_STAND_IN
    _remove_made(made)
    assert sorted(p.name for p in (book / "_build").iterdir()) == ["site"]
    theme = book / jupyter_book2.THEME_FOLDER
    theme.mkdir(parents=True)
    (theme / "template.yml").write_text("the user's own theme")
    assert _write_theme_stand_in(book) == [] and (theme / "template.yml").read_text() == "the user's own theme"
