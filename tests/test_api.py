"""The public Python API: every advertised name imports from ``nbscope`` and works; the README's example runs."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

import nbscope
from nbscope.analyse.diagnose import Findings

ROOT = Path(__file__).resolve().parents[1]
FILES = Path(__file__).resolve().parent / "files"


def test_every_advertised_name_imports() -> None:
    for name in nbscope.__all__:
        assert getattr(nbscope, name) is not None, name
    with pytest.raises(AttributeError):
        nbscope.no_such_name  # noqa: B018


@pytest.mark.slow
def test_profile_compare_diagnose_open_store(tmp_path: Path) -> None:
    store = nbscope.open_store(tmp_path / "api.db")
    first = nbscope.profile(FILES / "gate_tiny.ipynb", store=store)
    second = nbscope.profile(FILES / "gate_tiny.ipynb", store=tmp_path / "api.db")
    assert isinstance(first, nbscope.RunRecord) and first.status == "ok"
    assert [row["id"] for row in store.runs()] == [second.run_id, first.run_id]
    comparison = nbscope.compare(first, second)
    assert comparison.pairing.all_paired
    findings = nbscope.diagnose(first)
    assert isinstance(findings, Findings)  # a frozen value that reads as a sequence of findings
    with pytest.raises(nbscope.NbscopeError):
        nbscope.profile(tmp_path / "missing.ipynb")
    with pytest.raises(TypeError):
        nbscope.profile(FILES / "gate_tiny.ipynb", no_such_option=1)


def test_bench_runs_one_group(tmp_path: Path) -> None:
    record = nbscope.bench(only=["python"], size="quick", store=tmp_path / "bench.db", label="api-bench")
    assert record.kind == "bench" and record.run_id is not None
    assert record.measurements["totals"]["figures"] > 0
    assert [r.run_id for r in nbscope.open_store(tmp_path / "bench.db").records(label="api-bench")] == [record.run_id]


@pytest.mark.slow
def test_profile_labels_its_run_and_leaves_the_environment_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NBSCOPE_LABEL", raising=False)
    store = nbscope.open_store(tmp_path / "api.db")
    labelled = nbscope.profile(FILES / "gate_tiny.ipynb", store=store, label="api-cpu")
    plain = nbscope.profile(FILES / "gate_tiny.ipynb", store=store)
    assert labelled.label == "api-cpu" and plain.label is None
    assert "NBSCOPE_LABEL" not in os.environ
    assert [r.run_id for r in store.records(label="api-cpu")] == [labelled.run_id]
    with pytest.raises(nbscope.NbscopeError, match="cannot name runs"):
        nbscope.profile(FILES / "gate_tiny.ipynb", label="latest")


@pytest.mark.slow
def test_the_readme_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"<!-- api-example[^>]*-->\n```python\n(.*?)```", readme, re.S)
    assert example, "the README has no API example"
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(example.group(1), "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out.splitlines()
    assert re.match(r"\d+\.\d s over \d+ cells", out[0])
    assert out[1] == "True"
    assert (tmp_path / "nbscope-example.db").exists()
