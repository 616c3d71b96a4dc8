"""``nbscope import-jupyter-cache``: real caches made by jupyter-cache's executor and by a jupyter-book build."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbscope._errors import NbscopeError
from nbscope.record.jupyter_cache import find_database, import_cache, read_cache
from nbscope.record.store import Store

FILES = Path(__file__).resolve().parent / "files"
FINGERPRINT = {"fingerprint_version": 1, "cpu": {"model": "CI runner CPU", "logical_cores": 4}}


EXECUTE = """
import json, sys
from pathlib import Path
from jupyter_cache import get_cache
from jupyter_cache.executors import load_executor
cache, notebook = get_cache(sys.argv[1]), Path(sys.argv[2])
cache.add_nb_to_project(str(notebook))
for edit in (None, "total = sum(range(2000))\\ntotal"):
    if edit:  # a new version of the notebook: jupyter-cache keeps one row per version (hashkey)
        document = json.loads(notebook.read_text())
        document["cells"][1]["source"] = edit
        notebook.write_text(json.dumps(document))
    result = load_executor("local-serial", cache).run_and_cache(timeout=60)
    assert result.succeeded, result
"""


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A jupyter-cache folder holding two executions of gate_tiny.ipynb (the second after an edit), made by
    jupyter-cache's own executor in a subprocess (it starts real kernels)."""
    pytest.importorskip("jupyter_cache")
    folder = tmp_path_factory.mktemp("jcache")
    notebook = folder / "gate_tiny.ipynb"
    shutil.copy(FILES / "gate_tiny.ipynb", notebook)
    cache = folder / ".jupyter_cache"
    subprocess.run(
        [sys.executable, "-c", EXECUTE, str(cache), str(notebook)], check=True, capture_output=True, timeout=180
    )
    return cache


@pytest.mark.slow
def test_read_cache_rows(cache_dir: Path) -> None:
    rows = read_cache(cache_dir)
    assert len(rows) == 2
    for row in rows:
        assert row["uri"].endswith("gate_tiny.ipynb")
        assert 0 < row["execution_seconds"] < 60
        assert row["created"].endswith("Z") and row["created"][10] == "T"
    assert rows[0]["hashkey"] != rows[1]["hashkey"]
    assert find_database(cache_dir / "global.db") == cache_dir / "global.db"
    assert find_database(cache_dir.parent) == cache_dir / "global.db"


@pytest.mark.slow
def test_import_makes_runs_and_skips_repeats(cache_dir: Path, tmp_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(cache_dir.parent)
    store = Store(tmp_db)
    records, skipped = import_cache(cache_dir, store, fingerprint=dict(FINGERPRINT), fingerprint_source="ci.json")
    assert skipped == 0 and len(records) == 2
    rows = read_cache(cache_dir)
    for record, row in zip(records, rows, strict=True):
        stored = store.get(record.run_id)
        assert stored.kind == "jupyter-cache" and stored.target == "gate_tiny.ipynb"
        assert stored.measurements["totals"]["wall_s"] == pytest.approx(row["execution_seconds"])
        assert stored.started_at == row["created"]
        assert stored.settings["hashkey"] == row["hashkey"] and stored.settings["fingerprint_source"] == "ci.json"
        assert stored.digest and stored.fingerprint["cpu"]["model"] == "CI runner CPU"
        assert "cells" not in stored.measurements
    again, skipped = import_cache(cache_dir, store, fingerprint=dict(FINGERPRINT))
    assert again == [] and skipped == 2 and store.count() == 2


@pytest.mark.slow
def test_cli_import_then_history_and_gate(cache_dir: Path, tmp_db: Path, run_cli: Any) -> None:
    done = run_cli("import-jupyter-cache", cache_dir, "--db", tmp_db, "--json", cwd=cache_dir.parent)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert len(data["imported"]) == 2 and data["skipped"] == 0
    assert data["imported"][0]["target"] == "gate_tiny.ipynb"
    assert data["imported"][0]["settings"]["fingerprint_source"] == "importing machine"
    done = run_cli("history", "gate_tiny.ipynb", "--db", tmp_db, "--json")
    assert done.returncode == 0, done.stderr
    (series,) = json.loads(done.stdout)["series"]
    assert series["kind"] == "jupyter-cache" and series["runs"] == 2
    done = run_cli("gate", "--db", tmp_db, "--candidate", "latest", "--max-slowdown", "1000%", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["cells"] == [] and result["total"]["label"] == "total (whole notebook)"
    done = run_cli("import-jupyter-cache", cache_dir, "--db", tmp_db, cwd=cache_dir.parent)
    assert "imported 0 run(s)" in done.stdout and "2 already there" in done.stdout


@pytest.mark.slow
def test_fingerprint_file_option(cache_dir: Path, tmp_db: Path, tmp_path: Path, run_cli: Any) -> None:
    fingerprint = tmp_path / "ci-fingerprint.json"
    fingerprint.write_text(json.dumps(FINGERPRINT))
    done = run_cli("import-jupyter-cache", cache_dir, "--db", tmp_db, "--fingerprint", fingerprint, "--json")
    assert done.returncode == 0, done.stderr
    imported = json.loads(done.stdout)["imported"]
    assert imported[0]["fingerprint"]["cpu"]["model"] == "CI runner CPU" and imported[0]["fingerprint"]["digest"]


def test_bad_input(tmp_path: Path, tmp_db: Path, run_cli: Any) -> None:
    with pytest.raises(NbscopeError, match="no such file"):
        find_database(tmp_path / "missing")
    with pytest.raises(NbscopeError, match="no jupyter-cache database"):
        find_database(tmp_path)
    (tmp_path / "global.db").write_text("not sqlite")
    with pytest.raises(NbscopeError, match="not an SQLite"):
        read_cache(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    with sqlite3.connect(other / "global.db") as connection:
        connection.execute("CREATE TABLE t (x)")
    with pytest.raises(NbscopeError, match="not a jupyter-cache database"):
        read_cache(other)
    done = run_cli("import-jupyter-cache", tmp_path / "missing", "--db", tmp_db)
    assert done.returncode == 2 and done.stderr.startswith("nbscope: error:") and done.stderr.count("\n") == 1


@pytest.mark.slow
def test_jupyter_book_cache_build(tmp_path: Path, tmp_db: Path, run_cli: Any) -> None:
    """A real jupyter-book 1 build with execute_notebooks: cache, then import of _build/.jupyter_cache."""
    jupyter_book = shutil.which("jupyter-book")
    if jupyter_book is None:
        pytest.skip("jupyter-book is not installed")
    version = subprocess.run([jupyter_book, "--version"], capture_output=True, text=True, timeout=60).stdout
    if not re.search(r"Jupyter Book\s*:\s*1\.", version):
        pytest.skip(f"needs jupyter-book 1 (found: {version.strip()[:60]})")
    book = tmp_path / "book"
    book.mkdir()
    shutil.copy(FILES / "gate_tiny.ipynb", book / "gate_tiny.ipynb")
    (book / "_config.yml").write_text(
        "title: nbscope test book\nexecute:\n  execute_notebooks: cache\n  timeout: 60\n"
        "sphinx:\n  config:\n    html_theme: basic\n"
    )
    (book / "_toc.yml").write_text("format: jb-book\nroot: gate_tiny\n")
    build = subprocess.run([jupyter_book, "build", str(book)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    cache = book / "_build" / ".jupyter_cache"
    assert (cache / "global.db").is_file()
    done = run_cli("import-jupyter-cache", cache, "--db", tmp_db, "--json", cwd=book)
    assert done.returncode == 0, done.stderr
    (record,) = json.loads(done.stdout)["imported"]
    assert record["kind"] == "jupyter-cache" and record["target"] == "gate_tiny.ipynb"
    assert 0 < record["measurements"]["totals"]["wall_s"] < 120
