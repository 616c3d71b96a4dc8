"""Records from elsewhere (imports, CI artifacts, files passed by name) are input, not trusted data: a
malformed one is refused in one line naming the field, and the paths inside one are not opened outside
the working directory unless the user names them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from nbscope.record.run import RunRecord, load
from nbscope.record.sources import load_sources

FILES = Path(__file__).resolve().parent / "files"
RECORD = FILES / "records" / "cpu_unrolled_loop.json"
NOTEBOOK = FILES / "diag_unrolled_loop.ipynb"


def malformed(tmp_path: Path, name: str, change: Any) -> Path:
    document = json.loads(RECORD.read_text())
    change(document["measurements"])
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda m: m.__setitem__("cells", {"first": m["cells"][0]}), "measurements.cells is an object, not an array"),
        (
            lambda m: m["cells"][1].__setitem__("wall_s", "1.4"),
            "measurements.cells[1].wall_s is a string, not a number",
        ),
    ],
    ids=["cells-not-a-list", "wall-a-string"],
)
@pytest.mark.parametrize(
    "command",
    [
        ("import", "{bad}"),
        ("show", "{bad}"),
        ("compare", "{good}", "{bad}"),
        ("diagnose", "{bad}"),
        ("gate", "--baseline", "{good}", "--candidate", "{bad}"),
        ("report", "{good}", "{bad}"),
    ],
    ids=lambda c: c[0] if isinstance(c, tuple) else None,
)
def test_a_malformed_record_is_one_line_naming_the_field(
    command: tuple[str, ...], change: Any, field: str, tmp_path: Path, run_cli: Any
) -> None:
    good = tmp_path / "good.json"
    shutil.copy(RECORD, good)
    bad = malformed(tmp_path, "bad.json", change)
    db = tmp_path / "store.db"
    args = [part.format(good=good, bad=bad) for part in command]
    done = run_cli(*args, "--db", db)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr == f"nbscope: error: {bad}: {field}\n"
    if command[0] == "import":
        assert not db.exists()  # nothing written


def outside_setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A record naming a notebook in ``elsewhere/`` (by absolute path), and a working folder ``work/``."""
    elsewhere, work = tmp_path / "elsewhere", tmp_path / "work"
    elsewhere.mkdir()
    work.mkdir()
    notebook = elsewhere / NOTEBOOK.name
    shutil.copy(NOTEBOOK, notebook)
    document = json.loads(RECORD.read_text())
    document["target"] = str(notebook)
    document["measurements"]["notebook"]["path"] = str(notebook)
    record = tmp_path / "record.json"
    record.write_text(json.dumps(document))
    return record, notebook, work


def test_a_recorded_notebook_path_outside_the_working_directory_is_not_read(tmp_path: Path) -> None:
    record_path, notebook, work = outside_setup(tmp_path)
    record = load(record_path)
    sources, note = load_sources(record, root=work)
    assert sources == {}
    assert note is not None and str(notebook) in note and "outside the working directory" in note
    assert "--notebook" in note
    sources, note = load_sources(record, root=notebook.parent)  # inside: read
    assert len(sources) == 2 and note is None
    relative = json.loads(record_path.read_text())
    relative["target"] = relative["measurements"]["notebook"]["path"] = "../elsewhere/" + NOTEBOOK.name
    sources, note = load_sources(RunRecord.from_dict(relative), root=work)  # `..` does not climb out
    assert sources == {} and note is not None and "outside the working directory" in note


def test_diagnose_reads_a_notebook_outside_only_when_named(tmp_path: Path, run_cli: Any) -> None:
    record, notebook, work = outside_setup(tmp_path)

    def diagnosed(*extra: Any, cwd: Path) -> dict[str, Any]:
        done = run_cli("diagnose", record, "--rule", "unrolled-loop", "--json", *extra, cwd=cwd)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    unnamed = diagnosed(cwd=work)
    assert [f["rule"] for f in unnamed["findings"]] == []
    (skip,) = [s for s in unnamed["skipped"] if s["rule"] == "unrolled-loop"]
    assert "outside the working directory" in skip["reason"] and "--notebook" in skip["reason"]
    named = diagnosed("--notebook", notebook, cwd=work)
    assert [f["rule"] for f in named["findings"]] == ["unrolled-loop"]
    inside = diagnosed(cwd=notebook.parent)
    assert [f["rule"] for f in inside["findings"]] == ["unrolled-loop"]
