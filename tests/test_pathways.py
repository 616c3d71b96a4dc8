"""nbscope pathways: script, kernel and jupyter-book runs of one notebook, paired per cell."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from nbscope._errors import NbscopeError
from nbscope.analyse.pathways import pair_cells, verdict
from nbscope.api.pathways import parse_via, run_pathways
from nbscope.api.pathways._common import PathwayResult
from nbscope.record.run import RunRecord
from nbscope.schema.codec import decode
from nbscope.schema.pathways import PathwayEntry

FILES = Path(__file__).resolve().parent / "files"
SMALL = FILES / "pathways_small.md"
KERNEL_MAGIC = FILES / "pathways_kernel_magic.ipynb"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
LECTURE = CORPUS / "numpy_vs_numba_vs_jax.md"
JUPYTER_NAMES = ("ipykernel", "jupyter", "sphinx", "_nbscope_script_worker")


def _jupyterish(process: psutil.Process) -> bool:
    try:
        text = " ".join(process.cmdline())
    except psutil.Error:
        return False
    return any(name in text for name in JUPYTER_NAMES)


@pytest.fixture
def isolated_tmp(tmp_folder: Path) -> Iterator[Path]:
    """``tmp_folder``, and afterwards no Jupyter process of this test left running."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield tmp_folder
    leftovers = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and _jupyterish(p)]
    # Orphans too (a CLI run's children outlive it): anything still using this test's temporary folder.
    leftovers += [p for p in psutil.process_iter() if p.pid not in before and _uses(p, str(tmp_folder))]
    assert not leftovers, f"processes left behind: {[' '.join(p.cmdline())[:120] for p in leftovers]}"


def _uses(process: psutil.Process, folder: str) -> bool:
    try:
        return folder in " ".join(process.cmdline()) or process.cwd().startswith(folder)
    except psutil.Error:
        return False


def _leftover_paths(folder: Path) -> list[str]:
    # Jupyter's own runtime files (connection files) may live under TMPDIR only when the tools put them
    # there; nbscope's folders all start with "nbscope-".
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("nbscope-"))


# ---- input and pure logic ----------------------------------------------------------------------


def test_parse_via_accepts_lists_and_refuses_unknown_names() -> None:
    assert parse_via("script, kernel,book") == ["script", "kernel", "book"]
    assert parse_via(["kernel", "script,kernel"]) == ["kernel", "script"]
    assert parse_via(None) == ["script", "kernel", "book"]
    with pytest.raises(NbscopeError, match="unknown pathway 'nbconvert'"):
        parse_via("script,nbconvert")
    with pytest.raises(NbscopeError, match="names no pathway"):
        parse_via(" , ")


def test_bad_input_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(NbscopeError, match="no such file"):
        run_pathways(tmp_path / "missing.ipynb", fingerprint={"digest": "x"})
    with pytest.raises(NbscopeError, match="--repeat"):
        run_pathways(SMALL, repeat=0, fingerprint={"digest": "x"})
    with pytest.raises(NbscopeError, match="--timeout"):
        run_pathways(SMALL, timeout=0, fingerprint={"digest": "x"})
    with pytest.raises(NbscopeError, match="unsupported notebook type"):
        run_pathways(FILES / "../test_pathways.py", fingerprint={"digest": "x"})


def _cell(index: int, wall: float, status: str = "ok", samples: list[float] | None = None) -> dict[str, Any]:
    cell: dict[str, Any] = {
        "index": index,
        "source_hash": f"h{index}",
        "line": None,
        "first_line": f"cell {index}",
        "status": status,
        "wall_s": wall,
        "compile_s": 0.0,
        "run_s": wall,
        "jax": None,
        "numba": None,
    }
    if samples:
        cell["samples"] = {"wall_s": samples}
        cell["spread"] = 0.0
    return cell


def _pathway(name: str, walls: list[float], **overheads: float) -> PathwayResult:
    return PathwayResult(name, "ok", cells=[_cell(i, w) for i, w in enumerate(walls)], overheads=dict(overheads))


def _entries(documents: dict[str, dict[str, Any]]) -> dict[str, PathwayEntry]:
    return {name: decode(PathwayEntry, document) for name, document in documents.items()}


def test_verdict_says_the_pathway_does_not_explain_walls_within_noise() -> None:
    results = {
        "script": _pathway("script", [1.0, 0.010, 2.0], process_start_s=0.3),
        "book": _pathway("book", [1.1, 0.040, 2.2], book_outside_execution_s=2.6),
    }
    rows = pair_cells(results["script"].cells, results)
    assert all(r.paired and r.compared and not r.differs for r in rows)
    text = verdict(rows, _entries({n: {"status": "ok", "overheads": r.overheads} for n, r in results.items()}))
    assert text.startswith("the pathway does not explain the difference")
    assert "book build outside execution 2.60 s (book)" in text and "process start 300 ms (script)" in text


def test_verdict_names_the_cells_a_pathway_slows_down() -> None:
    results = {"script": _pathway("script", [1.0, 0.5]), "kernel": _pathway("kernel", [1.0, 2.0], kernel_start_s=0.8)}
    rows = pair_cells(results["script"].cells, results)
    assert [r.differs for r in rows] == [False, True]
    assert rows[1].slowest == "kernel"
    text = verdict(rows, _entries({n: {"status": "ok", "overheads": r.overheads} for n, r in results.items()}))
    assert text.startswith("the pathway explains 1.50 s") and "cell 2 kernel 2.00 s vs script 500 ms" in text


def test_small_differences_do_not_make_the_pathway_the_explanation() -> None:
    results = {"script": _pathway("script", [1.0, 0.10]), "kernel": _pathway("kernel", [1.0, 0.20])}
    rows = pair_cells(results["script"].cells, results)
    assert rows[1].differs
    text = verdict(rows, _entries({n: {"status": "ok", "overheads": r.overheads} for n, r in results.items()}))
    assert (
        text.startswith("the pathway does not explain the difference")
        and "1 small difference(s) totalling 100 ms" in text
    )


def test_repeats_widen_the_tolerance_to_the_measured_noise() -> None:
    noisy = PathwayResult("script", "ok", cells=[_cell(0, 1.0, samples=[0.5, 1.0, 1.5])])
    steady = PathwayResult("kernel", "ok", cells=[_cell(0, 1.4, samples=[1.4, 1.4, 1.4])])
    rows = pair_cells(noisy.cells, {"script": noisy, "kernel": steady})
    assert rows[0].tolerance_s == pytest.approx(1.5) and not rows[0].differs


def test_cells_that_failed_are_paired_but_not_compared() -> None:
    ok = _pathway("script", [0.1, 0.2])
    failed = PathwayResult("kernel", "partial", cells=[_cell(0, 0.1), _cell(1, 5.0, status="error")])
    rows = pair_cells(ok.cells, {"script": ok, "kernel": failed})
    assert rows[1].paired and not rows[1].compared and rows[1].ran_differently
    text = verdict(rows, _entries({"script": {"status": "ok"}, "kernel": {"status": "partial"}}))
    assert "cell 2: script ok, kernel error" in text


# ---- real runs ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_three_pathways_pair_every_cell_and_leave_nothing_behind(isolated_tmp: Path, tmp_db: Path) -> None:
    from nbscope.record.store import Store
    from nbscope.render.pathways import pathways_markdown, print_pathways
    from nbscope.render.terminal import print_record

    store = Store(tmp_db)
    events: list[tuple[str, str]] = []
    record = run_pathways(
        SMALL,
        ("script", "kernel", "book"),
        store=store,
        progress=lambda event: events.append((event.event, event.pathway)),
    )
    m = record.measurements
    assert record.kind == "pathways" and record.status == "ok", m["verdict"]
    assert [e for e in events if e[0] == "done"] == [("done", "script"), ("done", "kernel"), ("done", "book")]
    assert {n: e["status"] for n, e in m["pathways"].items()} == {"script": "ok", "kernel": "ok", "book": "ok"}
    assert m["totals"]["cells"] == m["totals"]["cells_paired"] == 6
    statuses = [{n: e["status"] for n, e in row["by_pathway"].items()} for row in m["cells"]]
    assert all(len(set(s.values())) == 1 for s in statuses), statuses  # each cell ran alike everywhere
    assert [next(iter(s.values())) for s in statuses] == ["ok", "ok", "ok", "ok", "expected-error", "skipped"]
    assert [row["line"] for row in m["cells"]][:2] == [16, 22]
    # The 0.4 s sleep is measured alike in every pathway.
    sleeps = {n: e["wall_s"] for n, e in m["cells"][1]["by_pathway"].items()}
    assert all(0.38 < w < 1.5 for w in sleeps.values()), sleeps
    # Fixed costs apart from the cells, each where it belongs.
    script, kernel, book = (m["pathways"][n] for n in ("script", "kernel", "book"))
    assert script["overheads"]["process_start_s"] > 0
    assert kernel["overheads"]["kernel_start_s"] > 0
    assert book["runner"]["executed_s"] is not None  # parsed from the book's own log line
    # The build outside execution (Sphinx): the book's wall time less the execution it reported.
    outside = book["overheads"]["book_build_s"] - book["runner"]["executed_s"]
    assert outside > 0 and book["overheads"]["book_outside_execution_s"] == pytest.approx(outside)
    # The book's own execution: its timer encloses the cells the probe saw in the kernel it started,
    # in the temporary book's folder (not the notebook's, as in a re-run by nbscope).
    assert book["runner"]["executed_s"] + 0.01 >= book["totals"]["wall_s"]
    assert Path(book["runner"]["kernel"]["cwd"]).name.startswith("nbscope-book-")
    assert book["runner"]["kernel"]["pid"] != kernel["runner"]["kernel"]["pid"]
    assert isinstance(m["verdict"], str) and "book build outside execution" in m["verdict"]
    # Stored, reloadable, and rendered.
    assert record.run_id is not None and store.get(record.run_id).measurements["verdict"] == m["verdict"]
    assert RunRecord.from_dict(json.loads(record.to_json())).kind == "pathways"
    print_pathways(record)
    print_record(record)
    markdown = pathways_markdown(record)
    assert "| Source | script | kernel | book | Note |" in markdown
    assert "**Verdict:**" in markdown
    assert _leftover_paths(isolated_tmp) == []


def test_book2_is_skipped_with_a_reason_when_not_installed(isolated_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbscope.api import jupyter_book2

    # An empty cache folder: nbscope's own jupyter-book 2 environment is not there.
    monkeypatch.setenv("NBSCOPE_CACHE_DIR", str(isolated_tmp / "empty-cache"))
    monkeypatch.delenv(jupyter_book2.COMMAND_VARIABLE, raising=False)
    found = jupyter_book2.find()
    if found.command:
        pytest.skip(f"jupyter-book 2 is installed here ({found.origin})")
    record = run_pathways(SMALL, "book2", fingerprint={"digest": "x"})
    entry = record.measurements["pathways"]["book2"]
    assert entry["status"] == "skipped" and entry["skipped"] == found.problem
    assert "nbscope book2-env --install" in entry["skipped"]
    assert record.status == "error" and record.measurements["verdict"].startswith("no pathway ran")


@pytest.mark.slow
def test_a_cell_cut_by_its_timeout_keeps_what_it_compiled_in_the_script_and_the_kernel(tmp_db: Path) -> None:
    # Cell 2 compiles a new shape at every step until --timeout stops it: the script's worker is stopped by SIGINT
    # (as a script at Ctrl-C) and the kernel is interrupted; in both, the cell keeps the probe's figures of it.
    from nbscope.record.store import Store

    notebook = FILES / "timeout_while_compiling.md"
    record = run_pathways(notebook, ("script", "kernel"), store=Store(tmp_db), timeout=5, env={"JAX_PLATFORMS": "cpu"})
    rows = record.measurements["cells"]
    for name, after in (("script", "not-run"), ("kernel", "ok")):
        assert [row["by_pathway"][name]["status"] for row in rows] == ["ok", "timeout", after], name
        stopped = rows[1]["by_pathway"][name]
        assert stopped["wall_s"] >= 5 and 0 < stopped["compile_s"] < stopped["wall_s"], (name, stopped)


@pytest.mark.slow
def test_cli_pathways_timeouts_and_kernel_only_magics(run_cli: Any, tmp_db: Path, isolated_tmp: Path) -> None:
    bad = run_cli("pathways", SMALL, "--via", "script,papermill", "--db", tmp_db)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "unknown pathway" in bad.stderr
    result = run_cli(
        "pathways", KERNEL_MAGIC, "--timeout", "2", "--json", "--db", tmp_db, env={"TMPDIR": str(isolated_tmp)}
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["kind"] == "pathways" and document["settings"]["via"] == ["script", "kernel", "book"]
    rows = document["measurements"]["cells"]
    statuses = {name: [r["by_pathway"][name]["status"] for r in rows] for name in ("script", "kernel", "book")}
    # A script has no %connect_info (kernel-only magic): skipped there, with the reason.
    assert statuses["script"] == ["ok", "skipped", "ok", "timeout", "not-run"]
    assert "%connect_info" in rows[1]["by_pathway"]["script"]["skip_reason"] and rows[1]["ran_differently"]
    # nbclient interrupts the timed-out cell and goes on; the book stops its execution there.
    assert statuses["kernel"] == ["ok", "ok", "ok", "timeout", "ok"]
    assert statuses["book"] == ["ok", "ok", "ok", "timeout", "not-run"]
    assert all(1.9 < rows[3]["by_pathway"][n]["wall_s"] < 15 for n in statuses)
    assert document["status"] == "partial"
    assert document["measurements"]["pathways"]["book"]["runner"]["execution_failed"] == "CellTimeoutError"
    # The progress line of a pathway cut short names its status; a reason it does not have is not printed.
    assert "pathways: kernel: partial" in result.stderr and "None" not in result.stderr
    listed = run_cli("runs", "--db", tmp_db)
    assert listed.returncode == 0 and "pathways" in listed.stdout
    assert _leftover_paths(isolated_tmp) == []


@pytest.mark.slow
def test_bench_workloads_through_pathways(isolated_tmp: Path, tmp_db: Path) -> None:
    from nbscope.api.pathways import run_bench_pathways
    from nbscope.record.store import Store

    # What `nbscope bench --pathway script,kernel --only python --size quick --json` calls.
    record = run_bench_pathways(
        via=["script", "kernel"], only=["python"], dtype="float32", size="quick", jax_platform=None, store=Store(tmp_db)
    )
    m = record.measurements
    assert record.kind == "pathways" and record.target == "bench:quick"
    assert m["totals"]["cells_paired"] == m["totals"]["cells"] == 2
    assert m["figures"] and all(set(f["by_pathway"]) == {"script", "kernel"} for f in m["figures"])
    assert all(f["by_pathway"]["script"]["median_s"] > 0 for f in m["figures"])
    assert "bench figures" in m["verdict"]
    assert _leftover_paths(isolated_tmp) == []


@pytest.mark.slow
@pytest.mark.corpus
def test_corpus_lecture_through_all_three_pathways(isolated_tmp: Path) -> None:
    if not LECTURE.exists():
        pytest.skip(f"the shared corpus is absent ({LECTURE} not found)")
    record = run_pathways(LECTURE, ("script", "kernel", "book"), fingerprint={"digest": "x"})
    m = record.measurements
    print(m["verdict"])
    assert {n: e["status"] for n, e in m["pathways"].items()} == {"script": "ok", "kernel": "ok", "book": "ok"}, m[
        "verdict"
    ]
    assert m["totals"]["cells_paired"] == m["totals"]["cells"] == len(m["cells"]) > 10
    assert all(set(row["by_pathway"]) == {"script", "kernel", "book"} for row in m["cells"])
    book = m["pathways"]["book"]
    outside = book["overheads"]["book_build_s"] - book["runner"]["executed_s"]
    assert outside > 0 and book["overheads"]["book_outside_execution_s"] == pytest.approx(outside)
    assert book["runner"]["executed_s"] + 0.01 >= book["totals"]["wall_s"] > 5
    assert Path(book["runner"]["kernel"]["cwd"]).name.startswith("nbscope-book-")
    assert "book build outside execution" in m["verdict"]
    assert _leftover_paths(isolated_tmp) == []
