"""Helpers shared by test_compare.py, test_diagnose_*.py and the forecast's tests (issue E): profile a test
notebook in a real kernel, load recorded fixtures, pick findings."""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbscope.analyse.diagnose import Finding
from nbscope.api.profile import ProfileOptions, profile
from nbscope.collect import notebook as notebook_module
from nbscope.record import run as record_module
from nbscope.record.run import RunRecord

FILES = Path(__file__).resolve().parent / "files"
RECORDS = FILES / "records"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def profile_with_programs(name: str) -> RunRecord:
    """``tests/files/<name>`` profiled with program data, JAX on the CPU: what the forecast's tests read."""
    return profile(FILES / name, ProfileOptions(programs=True, jax_platform="cpu"), fingerprint={"digest": "test"})


def profile_notebook(name: str, folder: Path, **options: Any) -> RunRecord:
    """Profile ``tests/files/<name>.ipynb`` in a fresh kernel; caches and side files stay under ``folder``.

    JAX runs on the CPU unless ``jax_platform`` says otherwise: the test notebooks show CPU behaviour
    (a GPU, where one is present, would make the compute-bound cells launch-bound and so on).
    """
    folder.mkdir(parents=True, exist_ok=True)
    options.setdefault("cache_root", folder / "jax-cache")
    options.setdefault("jax_platform", "cpu")
    return profile(FILES / f"{name}.ipynb", ProfileOptions(**options), live_path=folder / f"{name}.jsonl")


def sources_of(name: str) -> dict[str, str]:
    """Cell sources by hash of a test notebook (what diagnose would re-read from the record's path)."""
    notebook = notebook_module.read(FILES / f"{name}.ipynb")
    return {cell.source_hash: cell.source for cell in notebook.code_cells}


def load_record(name: str) -> RunRecord:
    return record_module.load(RECORDS / f"{name}.json")


def edited(record: RunRecord) -> RunRecord:
    """A deep copy to edit in a test without touching the loaded fixture."""
    return RunRecord.from_dict(copy.deepcopy(record.to_dict()))


def with_code(record: RunRecord, sources: Mapping[str, str]) -> RunRecord:
    """A copy of ``record`` as if its cells had run ``sources`` (code by the record's own cell hashes): what the
    rules say of the same figures with other code. A cell not in ``sources`` carries no code, and the copy
    names no notebook that could be read, so that nothing else lends it code."""
    copy_ = edited(record)
    for cell in copy_.measurements["cells"]:
        code = sources.get(cell.get("source_hash"))
        cell.pop("source", None)
        if code is not None:
            cell["source"], cell["source_hash"] = code, notebook_module.source_hash(code)
    (copy_.measurements.get("notebook") or {})["path"] = None
    copy_.target = f"elsewhere/{Path(record.target).name}"
    return copy_


def fired(findings: list[Finding], rule: str, cell: int | None = ...) -> list[Finding]:  # type: ignore[assignment]
    """Findings of ``rule`` (on code cell ``cell`` when given; ``None`` = notebook level)."""
    return [f for f in findings if f.rule == rule and (cell is ... or f.cell_index == cell)]


def fixture_builder() -> Any:
    """tests/files/records/make_fixtures.py as a module (to derive GPU variants of real records)."""
    spec = importlib.util.spec_from_file_location("make_fixtures", RECORDS / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_compact(findings: list[Finding], record: RunRecord | None = None, *, width: int = 100) -> None:
    """Each finding as `nbscope diagnose` prints it without --verbose fits in 8 lines of ``width`` columns, with
    its sentence, its fix and at least one labelled evidence line where it has any (issue 15)."""
    from nbscope.render.findings import FINDING_LINES, finding_text

    cells = {c.index: c for c in record.notebook_run().cells} if record is not None else {}
    for finding in findings:
        lines = [text for _, text in finding_text(finding, cells, width)]
        assert len(lines) <= FINDING_LINES == 8, (finding.rule, lines)
        assert all(len(line) <= width for line in lines), (finding.rule, lines)
        assert any(line.lstrip().startswith("fix: ") for line in lines), (finding.rule, lines)
        if finding.evidence_highlights():
            assert any(line.lstrip().startswith("· ") for line in lines), (finding.rule, lines)
