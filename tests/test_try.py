"""``nbscope try``: a remedy tried on one cell, measured both ways in real kernels, with the cell's results checked;
the notebook file never changes, and the trial's runs are stored linked to the run they test."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from conftest import TESTS_DIR, assert_one_line_error, run_in_process
from nbscope.api.trial import link_of, trials_of
from nbscope.record.store import Store

pytestmark = pytest.mark.slow
NOTEBOOKS = ("trial_scan.md", "trial_x64.md")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with both notebooks, each profiled once (runs 1 and 2 of its store)."""
    folder = tmp_path_factory.mktemp("try")
    for name in NOTEBOOKS:
        shutil.copy(TESTS_DIR / "files" / name, folder / name)
        ran = run_in_process(["profile", name, "--no-diagnose", "--db", ".nbscope/nbscope.db"], cwd=folder)
        assert ran.returncode == 0, ran.stderr
    return folder


def _try(project: Path, *args: str) -> dict:
    digest = hashlib.sha256((project / NOTEBOOKS[0]).read_bytes() + (project / NOTEBOOKS[1]).read_bytes()).hexdigest()
    ran = run_in_process(["try", *args, "--json", "--db", ".nbscope/nbscope.db"], cwd=project)
    assert ran.returncode == 0, ran.stderr
    after = hashlib.sha256((project / NOTEBOOKS[0]).read_bytes() + (project / NOTEBOOKS[1]).read_bytes()).hexdigest()
    assert after == digest  # the notebooks are never edited
    result: dict = json.loads(ran.stdout)
    return result


def test_unroll_is_measured_with_its_significance_and_stored_linked(project: Path) -> None:
    result = _try(project, "1", "--cell", "2", "--remedy", "unroll:8", "--repeats", "3")
    assert result["cell_verdict"] in ("faster", "slower", "within noise") and result["p_value"] is not None
    assert result["cell_as_is_s"] > 0 and result["cell_remedy_s"] > 0 and result["repeats"] == 3
    assert not any("nothing to act on" in note for note in result["notes"])  # the scan was unrolled
    verdicts = {v["name"]: v["verdict"] for v in result["values"]}
    assert verdicts["steps"] == "equal" and verdicts["x"] in ("equal", "close")
    store = Store(project / ".nbscope" / "nbscope.db")
    sides = [store.get(result["as_is_run"]), store.get(result["remedy_run"])]
    links = [link_of(record) for record in sides]
    assert [(link.of, link.cell, link.side) for link in links if link] == [(1, 2, "as-is"), (1, 2, "remedy")]
    assert [r.kind for r in sides] == ["trial", "trial"] and len(sides[1].notebook_run().cells) == 2
    assert [t.remedy for t in trials_of(store, store.get(1))] == ["unroll:8"]


def test_x64_off_changes_the_result_and_says_by_how_much(project: Path) -> None:
    result = _try(project, "2", "--cell", "2", "--remedy", "x64:off", "--repeats", "2")
    variance = next(v for v in result["values"] if v["name"] == "variance")
    assert variance["verdict"] == "differs" and variance["rel_diff"] > 1e-3
    assert "float64 → float32" in variance["note"]
    assert next(v for v in result["values"] if v["name"] == "count")["verdict"] == "equal"
    assert result["p_value"] is None  # two repeats a side: too few for the test, said so


def test_a_placement_on_a_cpu_machine_is_not_tested_here(project: Path) -> None:
    result = _try(project, "1", "--cell", "2", "--remedy", "cpu")
    assert "accelerator" in result["not_tested"] and result["as_is_run"] is None


@pytest.mark.parametrize(
    ("remedy", "words"),
    [
        ("cpu:no_such_function", ("no function named 'no_such_function'", "jit")),
        ("xla-flags:--xla_gpu_enable_command_buffer=WHILE", ("GPU flag",)),
        ("unroll:0", ("whole number",)),
    ],
)
def test_a_remedy_that_cannot_apply_is_refused_in_one_line(project: Path, remedy: str, words: tuple[str, ...]) -> None:
    ran = run_in_process(["try", "1", "--cell", "2", "--remedy", remedy, "--db", ".nbscope/nbscope.db"], cwd=project)
    assert_one_line_error(ran, *words)
