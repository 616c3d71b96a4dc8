"""End to end: the two real lectures in ../shared/corpus profile on CPU, read from the session's one audit of
them (slow: the audit takes minutes; test_audit_run.py checks the audit itself), and compare pairing one of
them with a warm rerun."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from nbscope.record.run import RunRecord

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
NEEDED = ("jax", "numpy", "numba", "matplotlib", "quantecon")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.corpus,
    pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus folder {CORPUS} is absent"),
    pytest.mark.skipif(
        any(importlib.util.find_spec(name) is None for name in NEEDED),
        reason=f"the lectures need {', '.join(NEEDED)} installed",
    ),
]


def fence_lines(path: Path) -> list[int]:
    """1-based lines of the ```{code-cell} fences, found independently of myst-nb."""
    return [
        number
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.match(r"^(`{3,}|~{3,})\{code-cell\}", text)
    ]


def run_lecture(name: str, audited_corpus: dict[str, Any]) -> RunRecord:
    """The lecture's CPU run from the session's audit of the corpus (tests/conftest.py ``audited_corpus``): a
    profile in an audit worker (recording program data for the forecast), stored and embedded in the audit file."""
    path = CORPUS / name
    (entry,) = [
        e for e in audited_corpus["measurements"]["notebooks"] if e["backend"] == "cpu" and Path(e["path"]).name == name
    ]
    assert entry["run_id"] is not None and not entry["reused"]
    record = RunRecord.from_dict(audited_corpus["runs"][str(entry["run_id"])])
    assert record.settings["jax_platform"] == "cpu"
    cells = record.measurements["cells"]
    assert record.measurements["notebook"]["format"] == "myst"
    # every code cell is listed, in order, with the line of its fence in the .md file
    assert [c["line"] for c in cells] == fence_lines(path)
    assert [c["index"] for c in cells] == list(range(len(cells)))
    assert all(c["wall_s"] is not None and c["compile_s"] is not None and c["run_s"] is not None for c in cells)
    return record


def test_numpy_vs_numba_vs_jax(audited_corpus: dict[str, Any]) -> None:
    record = run_lecture("numpy_vs_numba_vs_jax.md", audited_corpus)
    cells = record.measurements["cells"]
    failed = [(c["line"], c["status"], c["error"]) for c in cells if c["status"] != "ok"]
    assert not failed
    assert record.status == "ok"
    sources = {c.source_hash: c.source for c in _code_cells(CORPUS / "numpy_vs_numba_vs_jax.md")}
    qm = [c for c in cells if "qm_jax" in sources[c["source_hash"]]]
    assert len(qm) == 3  # the definition and two timed calls
    definition, first_call, second_call = qm
    assert definition["jax"]["compiles"] == 0
    # the first call compiles and runs, and the ledger tells the two apart
    assert first_call["jax"]["user_compiles"] >= 1
    assert "qm_jax" in {f["name"] for f in first_call["jax"]["functions"] if f["kind"] == "user"}
    assert first_call["compile_s"] > 0 and first_call["run_s"] > 0
    assert first_call["compile_s"] + first_call["run_s"] <= first_call["wall_s"] + 1e-9
    # the second call reuses the compiled program
    assert second_call["jax"]["compiles"] == 0 and second_call["compile_s"] == 0 and second_call["run_s"] > 0
    totals = record.measurements["totals"]
    assert totals["numba_compiles"] >= 1 and totals["user_compiles"] >= 1
    assert totals["cells"] == totals["cells_ok"] == len(cells)


def test_jax_intro(audited_corpus: dict[str, Any]) -> None:
    record = run_lecture("jax_intro.md", audited_corpus)
    cells = record.measurements["cells"]
    expected = [c for c in cells if "raises-exception" in c["tags"]]
    assert len(expected) == 1
    assert expected[0]["status"] == "expected-error"
    assert expected[0]["error"]["name"] == "TypeError"
    assert expected[0]["line"] == 173
    others = [(c["line"], c["status"], c["error"]) for c in cells if c is not expected[0] and c["status"] != "ok"]
    assert not others
    assert record.status == "ok"
    totals = record.measurements["totals"]
    assert totals["compiles"] > 0 and totals["user_compiles"] > 0 and totals["eager_compiles"] > 0
    assert totals["cells_ok"] == len(cells)


def test_the_audits_run_and_a_warm_rerun_pair_every_cell(audited_corpus: dict[str, Any], tmp_path: Path) -> None:
    """compare on a real MyST lecture: the audit's run (JAX cache off) and a profile of the lecture with
    ``--jax-cache warm`` pair every cell by its hash, keep the MyST lines and name the cache setting. The
    audit's run stands in for a profile of its own: one run of the lecture fewer (cold against warm on one
    notebook is test_compare.py's ``test_cli_compare_runs_in_the_store_names_the_cache_setting``)."""
    from nbscope.analyse.compare import compare
    from nbscope.api.profile import ProfileOptions, profile
    from nbscope.record import run as record_module

    name = "numpy_vs_numba_vs_jax.md"
    audited = run_lecture(name, audited_corpus)
    warm = profile(
        CORPUS / name,
        ProfileOptions(jax_cache="warm", jax_platform="cpu", cache_root=tmp_path / "cache"),
        live_path=tmp_path / "warm.jsonl",
    )
    data = compare(audited, warm).to_dict()
    assert data["pairing"]["all_paired"] and data["pairing"]["by_hash"] == len(audited.measurements["cells"])
    assert all(row["line"] for row in data["cells"])  # MyST lines kept
    fields = {d["field"]: d for d in data["differences"]}
    assert (fields["settings.jax_cache"]["a"], fields["settings.jax_cache"]["b"]) == ("off", "warm")
    record_module.dump(warm, tmp_path / "warm.json")  # the runs stay readable as exported records
    assert record_module.load(tmp_path / "warm.json").measurements["cells"]


def _code_cells(path: Path) -> list:
    from nbscope.collect import notebook

    return notebook.read(path).code_cells
