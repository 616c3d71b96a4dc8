"""Terminal output shows the code as written: sources, error messages, function names and paths that look
like rich markup (``x[i]``, ``[/x]``) print verbatim, and the cell number and line columns are never cut.

One real profile of ``tests/files/markup_source.md`` (a MyST notebook in a folder named ``lecture[i]``),
then ``show``, ``compare`` and ``diagnose`` on it, through the command line, piped as in CI."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import run_in_process
from nbscope.analyse.diagnose import Finding, Findings, Skip
from nbscope.analyse.recommend import Recommendation
from nbscope.collect import notebook as notebook_module
from nbscope.render import backends as backends_view
from nbscope.render import findings as findings_view
from nbscope.render.terminal import console

FILES = Path(__file__).resolve().parent / "files"
NOTEBOOK = FILES / "markup_source.md"
# First lines (as the ledger cuts them, to 48 characters) that rich would misread as markup.
MARKUP_LINES = ("y = x[i]", 'tag = "[/x]"', 'label = "[bold red]not styled[/bold red]"', "z = z + x[i]")
TABLE_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s")


def nbscope(*args: str | Path, cwd: Path, columns: int | None = 140) -> subprocess.CompletedProcess[str]:
    """``nbscope ARGS`` (in this process) with its output piped (not a terminal); ``columns`` sets COLUMNS (default:
    a wide CI log, so that whole source lines show; piped output is as wide as $COLUMNS says, else 80)."""
    done = run_in_process(args, env={"COLUMNS": None if columns is None else str(columns)}, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "MarkupError" not in done.stderr, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("markup")
    (root / "_toc.yml").write_text("format: jb-book\nroot: intro\n")  # a book: notebooks are named from here
    folder = root / "lecture[i]"
    folder.mkdir()
    shutil.copy(NOTEBOOK, folder / NOTEBOOK.name)
    # The notebook raises on purpose (its error message carries markup too): --allow-errors, so it exits 0.
    done = nbscope(
        "profile", f"lecture[i]/{NOTEBOOK.name}", "--all", "--allow-errors", "--db", "db/nbscope.db", cwd=root
    )
    cells = {(str(c.index + 1), str(c.line)) for c in notebook_module.read(NOTEBOOK).code_cells}
    return {"root": root, "stdout": done.stdout, "cells": cells}


def number_and_line_columns(text: str) -> set[tuple[str, str]]:
    """The ``#`` and ``line`` columns of a ledger's rows (its first two columns); rows that continue a
    wrapped one leave both empty."""
    return {m.groups() for m in map(TABLE_ROW.match, text.splitlines()) if m}


@pytest.mark.slow
def test_profile_ledger_shows_sources_as_written(profiled: dict[str, Any]) -> None:
    out = profiled["stdout"]
    for line in MARKUP_LINES:
        assert line in out, line
    assert "cell 5 (line 109): error ValueError: bad value [/x] at x[i]" in out  # the error message
    assert f"lecture[i]/{NOTEBOOK.name}" in out  # the target in the header
    assert "saved as run 1 in db" in out
    assert number_and_line_columns(out) == profiled["cells"]


@pytest.mark.slow
def test_show_in_a_narrow_terminal_keeps_the_cell_number_and_line_whole(profiled: dict[str, Any]) -> None:
    wide = nbscope("show", "1", "--db", "db/nbscope.db", cwd=profiled["root"]).stdout
    for line in MARKUP_LINES:
        assert line in wide, line
    assert number_and_line_columns(wide) == profiled["cells"]
    narrow = nbscope("show", "1", "--db", "db/nbscope.db", cwd=profiled["root"], columns=80).stdout
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert number_and_line_columns(narrow) == profiled["cells"]  # 11 cells, lines up to 138: none cut to "…"
    assert "y = x[i]" in narrow


@pytest.mark.slow
def test_compare_shows_sources_as_written(profiled: dict[str, Any]) -> None:
    out = nbscope("compare", "1", "1", "--db", "db/nbscope.db", cwd=profiled["root"]).stdout
    for line in ("y = x[i]", 'tag = "[/x]"', 'label = "[bold red]not styled', "z = z + x[i]"):
        assert line in out, line
    assert re.search(r"^\s*10\s+134\s", out, re.MULTILINE)  # cell 10, line 134


@pytest.mark.slow
def test_diagnose_shows_names_as_written(profiled: dict[str, Any]) -> None:
    root = profiled["root"]
    out = nbscope("diagnose", "1", "--db", "db/nbscope.db", cwd=root).stdout
    assert f"lecture[i]/{NOTEBOOK.name}" in out
    assert "`scale` compiled 3 times" in out and "float32[3], float32[4], float32[5]" in out
    # A record from elsewhere (imported, hand-edited) names a function in markup-like text.
    nbscope("export", "1", "-o", "run.json", "--db", "db/nbscope.db", cwd=root)
    record = json.loads((root / "run.json").read_text())
    for cell in record["measurements"]["cells"]:
        for function in (cell.get("jax") or {}).get("functions") or []:
            if function["name"] == "scale":
                function["name"] = "scale[/x]"
    (root / "renamed.json").write_text(json.dumps(record))
    out = nbscope("diagnose", "renamed.json", "--db", "db/nbscope.db", "--verbose", cwd=root).stdout
    assert "`scale[/x]` compiled 3 times" in out
    assert "function: scale[/x]" in out  # evidence (the whole of it: --verbose)
    assert "Give `scale[/x]` fixed shapes" in out  # fix


def test_findings_and_notes_print_as_written() -> None:
    """Every text of a finding card, a skipped rule and a note is escaped (no kernel needed)."""

    finding = Finding(
        rule="retrace-churn",
        title="Retrace [/x] churn",
        cell_index=None,
        severity="low",
        confidence=0.9,
        evidence={"function": "f[/x]", "shapes": ["float32[3]"]},
        summary="`f[/x]` compiled x[i] times",
        fix="keep [bold]f[/bold] steady",
    )
    with console.capture() as captured:
        findings_view.print_findings(
            Findings(
                (finding,),
                skipped=(Skip("unrolled-loop", "needs [/x] sources", cell_index=2),),
                notes=("notebook not found (runs[i]/a.md)",),
            )
        )
        backends_view.print_unavailable(
            [
                {
                    "backend": "cuda",
                    "run_id": None,
                    "available": False,  # as BackendsResult
                    "reason": "RuntimeError: [/x] no device",
                    "record": None,
                }
            ]
        )
        backends_view.print_recommendation(
            Recommendation(
                recommendation=None,
                reason="only [i] ran",
                basis="measured",
                estimates=None,
                pinned=(),
                caveats=(),
                runs={},
            )
        )
    out = captured.get()
    for text in (
        "Retrace [/x] churn",
        "`f[/x]` compiled x[i] times",
        "function: f[/x]",
        "keep [bold]f[/bold]",
        "needs [/x] sources",
        "runs[i]/a.md",
        "RuntimeError: [/x] no device",
        "only [i] ran",
    ):
        assert text in out, text
