"""The typed comparison (``nbscope.analyse.compare.Comparison``) on two real stored profiles of a notebook whose
second cell was edited between the runs: its JSON is what ``nbscope compare --json`` prints, the edited cell
pairs as edited by the code each record carries, and the renderers' attributes hold the records' figures."""

from __future__ import annotations

import dataclasses
import difflib
import json
from typing import Any

import pytest

from nbscope._errors import NbscopeError
from nbscope.analyse import compare as compare_module
from nbscope.record.store import Store
from nbscope.schema.codec import encode

HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""
# The edited cell keeps its first line: paired by first lines, its two versions would look the same.
BEFORE = ("import time", "# warm up\ntime.sleep(0.05)\nresult = 'slow'", "print(result)")
AFTER = ("import time", "# warm up\ntime.sleep(0.01)\nresult = 'fast' * 2", "print(result)")


def _myst(cells: tuple[str, ...]) -> str:
    return HEADER + "".join(f"\n```{{code-cell}} ipython3\n{code}\n```\n" for code in cells)


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two real profiles of one notebook, its second cell edited in between, in a store; the notebook is
    gone afterwards, so whatever pairs the cells can read their code only from the records."""
    from nbscope.api.profile import ProfileOptions, profile

    folder = tmp_path_factory.mktemp("compare-typed")
    notebook = folder / "lecture.md"
    store = Store(folder / "nbscope.db")
    ids = []
    for number, cells in enumerate((BEFORE, AFTER)):
        notebook.write_text(_myst(cells), encoding="utf-8")
        ids.append(profile(notebook, ProfileOptions(), store=store, live_path=folder / f"{number}.jsonl").run_id)
    notebook.unlink()
    return {"folder": folder, "store": store, "ids": ids}


@pytest.mark.slow
def test_json_is_what_the_command_prints(stored: dict[str, Any], run_cli: Any) -> None:
    a, b = (stored["store"].get(run_id) for run_id in stored["ids"])
    comparison = compare_module.compare(a, b)
    done = run_cli(
        "compare", str(a.run_id), str(b.run_id), "--db", stored["folder"] / "nbscope.db", "--json", cwd=stored["folder"]
    )
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed.pop("recommendation") is None  # one backend: nothing to recommend
    assert printed == json.loads(json.dumps(comparison.to_dict(), default=str))
    assert [row["match"] for row in printed["cells"]] == ["hash", "edited", "hash"]


@pytest.mark.slow
def test_an_edited_cell_pairs_by_the_code_each_record_carries(stored: dict[str, Any]) -> None:
    a, b = (stored["store"].get(run_id) for run_id in stored["ids"])
    comparison = compare_module.compare(a, b)
    edited = comparison.rows[1]
    assert (edited.match, edited.index_a, edited.index_b) == ("edited", 1, 1)
    # The similarity of the whole code that ran, not of the first lines (those are equal).
    expected = difflib.SequenceMatcher(a=BEFORE[1], b=AFTER[1], autojunk=False).ratio()
    assert edited.similarity == round(expected, 3) < 1.0
    assert edited.first_line == "# warm up" and edited.code_line == "time.sleep(0.05)"  # A's cell names the row
    pair = comparison.pairs[1]
    assert (pair.a.source, pair.b.source) == (BEFORE[1], AFTER[1]) and pair.source_changed
    assert comparison.pairing.all_paired and comparison.pairing.by_order == 1 and comparison.pairing.by_hash == 2


@pytest.mark.slow
def test_rows_and_totals_hold_the_records_figures(stored: dict[str, Any]) -> None:
    a, b = (stored["store"].get(run_id) for run_id in stored["ids"])
    comparison = compare_module.compare(a, b)
    run_a, run_b = a.notebook_run(), b.notebook_run()
    for row, cell_a, cell_b in zip(comparison.rows, run_a.cells, run_b.cells, strict=True):
        assert (row.a.wall_s, row.b.wall_s) == (cell_a.wall_s, cell_b.wall_s)
        assert row.delta_s == cell_b.wall_s - cell_a.wall_s
        assert row.winner.text == encode(row)["text"]
    wall = comparison.total("wall_s")
    assert (wall.a, wall.b) == (run_a.totals.wall_s, run_b.totals.wall_s)
    assert comparison.run_a.label == f"run {a.run_id}" and comparison.run_b.platform == "cpu"
    assert comparison.to_dict()["totals"]["wall_s"]["text"] == wall.winner.text
    with pytest.raises(dataclasses.FrozenInstanceError):
        comparison.rows[0].match = "moved"  # type: ignore[misc]


def test_winner_as_data_and_as_json() -> None:
    assert compare_module.Winner.of(3.1, 1.0) == compare_module.Winner("B", 3.1, "B 3.1× faster")
    assert compare_module.Winner.of(3.1, 1.0).to_dict() == {"winner": "B", "factor": 3.1, "text": "B 3.1× faster"}
    noisy = compare_module.within_noise(compare_module.Winner.of(0.4, 0.2), 0.5, -0.2, "unwaited")
    assert noisy.to_dict() == {
        "winner": "tie",
        "factor": 2.0,
        "text": "within noise",
        "within_noise": True,
        "noise_floor_s": 0.5,
    }


def test_different_notebooks_are_refused_unless_allowed() -> None:
    from diag_support import load_record

    cpu, x64 = load_record("cpu_latency_loop"), load_record("cpu_x64")
    with pytest.raises(NbscopeError, match="different notebooks"):
        compare_module.compare(cpu, x64)
    comparison = compare_module.compare(cpu, x64, allow_different=True)
    assert not comparison.same_notebook and comparison.to_dict()["same_notebook"] is False
    assert any(d.field == "target" and d.note == "different notebooks" for d in comparison.differences)
