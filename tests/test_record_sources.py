"""A run record carries the code that ran (issue P): findings do not depend on the folder a command runs in,
on the notebook file being there, or on edits made to it after the run; records of schema version 1 (no code)
still load, and read an unchanged notebook."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from diag_support import FILES, RECORDS
from nbscope.analyse.diagnose import diagnose
from nbscope.record import run as record_module
from nbscope.record.sources import load_sources, naming

pytestmark = pytest.mark.slow

RunCli = Callable[..., Any]


def _findings(result: Any) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["findings"]


@pytest.fixture(scope="module")
def profiled_elsewhere(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """diag_unrolled_loop.ipynb copied into a folder of its own and profiled by its absolute path from another
    folder, into a store of its own (one real kernel for the whole module)."""
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("sources")
    lecture_folder, elsewhere = root / "some" / "other" / "folder", root / "cwd"
    lecture_folder.mkdir(parents=True)
    elsewhere.mkdir()
    notebook = lecture_folder / "lecture.ipynb"
    shutil.copy(FILES / "diag_unrolled_loop.ipynb", notebook)
    db = root / "store" / "nbscope.db"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "nbscope",
            "profile",
            str(notebook),
            "--db",
            str(db),
            "--jax-platform",
            "cpu",
            "--no-diagnose",
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return {"root": root, "notebook": notebook, "db": db, "elsewhere": elsewhere}


def test_the_record_carries_each_cells_whole_source_and_line_range(profiled_elsewhere: dict[str, Path]) -> None:
    from nbscope.record.store import Store

    record = Store(profiled_elsewhere["db"]).get(1)
    assert record.schema_version == record_module.SCHEMA_VERSION == 2
    cells = record.measurements["cells"]
    simulate = next(c for c in cells if "def simulate" in (c.get("source") or ""))
    assert "for t in range(200):" in simulate["source"]
    assert record.notebook_run().sources[simulate["source_hash"]] == simulate["source"]
    text = profiled_elsewhere["notebook"].read_text().split("\n")
    first, last = simulate["lines"]
    assert text[first - 1].strip().startswith('"source"') and last > first and simulate["line"] is None


def test_findings_are_the_same_from_any_folder(
    profiled_elsewhere: dict[str, Path], run_cli: RunCli, tmp_path: Path
) -> None:
    db = profiled_elsewhere["db"]
    here = _findings(run_cli("diagnose", "latest", "--db", db, "--json", cwd=profiled_elsewhere["elsewhere"]))
    other = tmp_path / "unrelated"
    other.mkdir()
    there = _findings(run_cli("diagnose", "latest", "--db", db, "--json", cwd=other))
    beside = _findings(run_cli("diagnose", "latest", "--db", db, "--json", cwd=profiled_elsewhere["notebook"].parent))
    assert "unrolled-loop" in {f["rule"] for f in here}
    assert here == there == beside


def test_an_exported_record_diagnoses_the_same_where_the_notebook_does_not_exist(
    profiled_elsewhere: dict[str, Path], run_cli: RunCli, tmp_path: Path
) -> None:
    db = profiled_elsewhere["db"]
    before = _findings(run_cli("diagnose", "latest", "--db", db, "--json", cwd=profiled_elsewhere["elsewhere"]))
    exported = tmp_path / "run.json"
    assert run_cli("export", "latest", "--db", db, "-o", exported).returncode == 0
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    fresh = laptop / "fresh.db"
    moved = profiled_elsewhere["root"] / "moved-away.ipynb"
    profiled_elsewhere["notebook"].rename(moved)  # the notebook exists nowhere the record names
    try:
        assert run_cli("import", exported, "--db", fresh, cwd=laptop).returncode == 0
        after = _findings(run_cli("diagnose", "latest", "--db", fresh, "--json", cwd=laptop))
    finally:
        moved.rename(profiled_elsewhere["notebook"])
    assert after == before


def test_diagnose_quotes_the_code_that_ran_after_the_notebook_is_edited(
    profiled_elsewhere: dict[str, Path], run_cli: RunCli
) -> None:
    notebook = profiled_elsewhere["notebook"]
    original = notebook.read_text()
    notebook.write_text(original.replace("for t in range(200):", "for step in range(3):  # edited later"))
    try:
        result = run_cli("diagnose", "latest", "--db", profiled_elsewhere["db"], "--verbose", cwd=notebook.parent)
    finally:
        notebook.write_text(original)
    assert result.returncode == 0, result.stderr
    assert "for t in range(200)" in result.stdout and "edited later" not in result.stdout


def test_a_version_1_record_reads_an_unchanged_notebook_and_says_why_code_is_missing_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = record_module.load(RECORDS / "cpu_unrolled_loop.json")
    assert record.schema_version == 1 and not record.notebook_run().sources
    folder = tmp_path / "project"
    (folder / Path(record.target).parent).mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(folder)
    sources, note = load_sources(record)
    assert sources == {} and "schema version 1" in (note or "") and "not here" in (note or "")
    findings = diagnose(record)
    assert any("schema version 1" in n for n in findings.notes)
    shutil.copy(FILES / "diag_unrolled_loop.ipynb", folder / record.target)
    sources, note = load_sources(record)
    assert note is None and len(sources) == len(record.measurements["cells"])


def test_a_notebook_named_for_a_version_1_record_lends_only_the_cells_that_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = record_module.load(RECORDS / "cpu_unrolled_loop.json")
    monkeypatch.chdir(tmp_path)  # the notebook the record names is not here
    named = naming(record, FILES / "diag_unrolled_loop.ipynb")
    assert named is not record and record.named_sources is None  # the record read from the store is untouched
    assert named.to_dict() == record.to_dict()  # what the user named is never stored or exported
    sources, note = load_sources(named)
    assert note is None and len(sources) == len(record.measurements["cells"])
    # A notebook edited since: the edited cell's code is not the code that ran, so it is not used.
    edited = {key: source + "\n# edited" for key, source in list(sources.items())[:1]}
    sources, note = load_sources(naming(record, edited))
    assert sources == {} and "not in the notebook named for it" in (note or "")
    # Diagnosis reads the named code as it reads a record's own.
    assert any(f.rule == "unrolled-loop" for f in diagnose(record, sources=FILES / "diag_unrolled_loop.ipynb"))


@pytest.mark.parametrize("fixture", sorted(p.name for p in RECORDS.glob("*.json")))
def test_every_checked_in_record_of_an_earlier_version_still_loads(fixture: str) -> None:
    record = record_module.load(RECORDS / fixture)
    assert record.schema_version <= record_module.SCHEMA_VERSION
    again = record_module.loads(record.to_json(), source=fixture)
    assert again.to_dict() == record.to_dict()
