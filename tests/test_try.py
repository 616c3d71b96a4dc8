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
NOTEBOOKS = ("trial_scan.md", "trial_x64.md", "diag_unrolled_loop.ipynb")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with the notebooks, each profiled once (runs 1, 2 and 3 of its store)."""
    folder = tmp_path_factory.mktemp("try")
    for name in NOTEBOOKS:
        shutil.copy(TESTS_DIR / "files" / name, folder / name)
        ran = run_in_process(["profile", name, "--no-diagnose", "--db", ".nbscope/nbscope.db"], cwd=folder)
        assert ran.returncode == 0, ran.stderr
    return folder


def _hashes(project: Path) -> list[str]:
    return [hashlib.sha256((project / name).read_bytes()).hexdigest() for name in NOTEBOOKS]


def _try(project: Path, *args: str) -> dict:
    before = _hashes(project)
    ran = run_in_process(["try", *args, "--json", "--db", ".nbscope/nbscope.db"], cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert _hashes(project) == before  # the notebooks are never edited
    result: dict = json.loads(ran.stdout)
    return result


@pytest.fixture(scope="module")
def unrolled(project: Path) -> dict:
    """The scan cell of run 1 tried with unroll:8, three repeats each way."""
    return _try(project, "1", "--cell", "2", "--remedy", "unroll:8", "--repeats", "3")


def test_unroll_is_measured_with_its_significance_and_stored_linked(project: Path, unrolled: dict) -> None:
    result = unrolled
    assert result["cell_verdict"] in ("faster", "slower", "within noise") and result["p_value"] is not None
    assert result["cell_as_is_s"] > 0 and result["cell_remedy_s"] > 0 and result["repeats"] == 3
    assert not any("nothing to act on" in note for note in result["notes"])  # the scan was unrolled
    verdicts = {v["name"]: v["verdict"] for v in result["values"]}
    assert verdicts["steps"] == "equal" and verdicts["x"] in ("equal", "close")
    store = Store(project / ".nbscope" / "nbscope.db")
    sides = [store.get(result["as_is_run"]), store.get(result["remedy_run"])]
    links = [link_of(record) for record in sides]
    assert [(link.of, link.cell, link.side) for link in links if link] == [(1, 2, "as-is"), (1, 2, "remedy")]
    assert [r.kind for r in sides] == ["trial", "trial"] and len(sides[1].notebook_run().cells) == 3
    assert [t.remedy for t in trials_of(store, store.get(1))] == ["unroll:8"]


def test_a_trial_shows_in_show_report_and_the_lecture_page(project: Path, unrolled: dict) -> None:
    shown = run_in_process(["show", "1", "--db", ".nbscope/nbscope.db"], cwd=project)
    assert "trial unroll:8: cell 2 " in shown.stdout and "results equal" in shown.stdout
    assert (
        run_in_process(["report", "1", "-o", "report.html", "--db", ".nbscope/nbscope.db"], cwd=project).returncode == 0
    )
    assert run_in_process(["publish", ".nbscope/nbscope.db", "-o", "site"], cwd=project).returncode == 0
    pages = [project / "report.html", *(project / "site" / "lectures").glob("trial_scan*.html")]
    assert len(pages) == 2 and all(
        "Remedies tried" in page.read_text() and "unroll:8" in page.read_text() for page in pages
    )


def test_diagnose_try_puts_what_it_measured_in_the_finding(project: Path) -> None:
    ran = run_in_process(
        ["diagnose", "3", "--try", "--repeats", "1", "--json", "--db", ".nbscope/nbscope.db"], cwd=project
    )
    measured = [f["evidence"]["measured"] for f in json.loads(ran.stdout)["findings"] if "measured" in f["evidence"]]
    assert measured and all(m["remedy"] == "cache:warm" and m["remedy_run"] is not None for m in measured)


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
        # one strict parser of a number (units.whole): `²` passes isdigit() and fails int(); 100,000 digits pass
        # neither int()'s limit nor any loop's length; Arabic-Indic digits are not a count written in ASCII
        ("unroll:²", ("whole number",)),
        ("unroll:" + "9" * 100_000, ("whole number", "100,000")),
        ("unroll:١٢", ("whole number",)),
        ("threads:²", ("threads: takes a number",)),
    ],
    ids=["cpu-function", "gpu-flag", "unroll-0", "superscript", "100000-digits", "arabic-indic", "threads-superscript"],
)
def test_a_remedy_that_cannot_apply_is_refused_in_one_line(project: Path, remedy: str, words: tuple[str, ...]) -> None:
    ran = run_in_process(["try", "1", "--cell", "2", "--remedy", remedy, "--db", ".nbscope/nbscope.db"], cwd=project)
    assert_one_line_error(ran, *words)


def test_a_run_named_by_its_absolute_path_is_found_while_its_file_is_unchanged(tmp_path: Path) -> None:
    """A notebook in no project profiled into a store elsewhere is stored by its absolute path (a device run's
    scratch folder): try finds that very file, and refuses it once it no longer holds what the run ran."""
    folder, elsewhere = tmp_path / "lecture", tmp_path / "stores"
    folder.mkdir(), elsewhere.mkdir()
    notebook = folder / "trial_scan.md"
    shutil.copy(TESTS_DIR / "files" / "trial_scan.md", notebook)
    db = str(elsewhere / "s.db")
    ran = run_in_process(["profile", "trial_scan.md", "--no-diagnose", "--db", db], cwd=folder)
    assert ran.returncode == 0, ran.stderr
    assert Store(db).get(1).target == notebook.resolve().as_posix()
    tried = run_in_process(["try", "1", "--cell", "2", "--remedy", "cpu", "--json", "--db", db], cwd=tmp_path)
    assert tried.returncode == 0, tried.stderr
    assert "accelerator" in json.loads(tried.stdout)["not_tested"]
    notebook.write_text(notebook.read_text() + "\n```{code-cell} ipython3\n1 + 1\n```\n")
    tried = run_in_process(["try", "1", "--cell", "2", "--remedy", "cpu", "--db", db], cwd=tmp_path)
    assert_one_line_error(tried, "is not found")


def test_through_cell_stops_each_run_after_the_cell_tried(project: Path) -> None:
    """--through-cell (a long notebook on a device paid by the minute): the cells after the one tried do not run in
    either side, the trial says so, and its runs record it."""
    result = _try(project, "1", "--cell", "2", "--remedy", "unroll:2", "--repeats", "1", "--through-cell")
    assert any("--through-cell" in note for note in result["notes"])
    store = Store(project / ".nbscope" / "nbscope.db")
    for run_id in (result["as_is_run"], result["remedy_run"]):
        record = store.get(run_id)
        link = link_of(record)
        assert link is not None and link.through_cell
        cells = record.notebook_run().cells
        assert len(cells) > 2 and all(c.wall_s is None for c in cells[2:]) and cells[1].wall_s


def test_a_placement_tried_on_a_machine_without_an_accelerator_is_not_tested_here(tmp_path: Path) -> None:
    """A run from the TPU (a device fixture) tried here: on a machine with no GPU or TPU, JAX runs on the CPU either
    way, so keeping work on the CPU is not tested here, and nothing runs or is stored."""
    from audit_support import CORPUS

    lecture = CORPUS / "jax_intro.md"
    if not lecture.is_file():
        pytest.skip(f"corpus lecture not found: {lecture}")
    from nbscope.api.trial import _accelerator_here
    from nbscope.collect import fingerprint

    if _accelerator_here(fingerprint.collect()):
        pytest.skip("this machine has an accelerator: the trial would run here")
    shutil.copy(lecture, tmp_path / "jax_intro.md")
    db = str(tmp_path / "s.db")
    fixture = TESTS_DIR / "files" / "device" / "tpu_v5e" / "tpu_jax_intro.json"
    assert run_in_process(["import", str(fixture), "--db", db], cwd=tmp_path).returncode == 0
    ran = run_in_process(["try", "1", "--cell", "3", "--remedy", "cpu", "--json", "--db", db], cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert "no GPU or TPU" in result["not_tested"] and result["as_is_run"] is None
    assert Store(db).records(kind="trial") == []
