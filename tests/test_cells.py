"""The cell model: derivation, repeats, totals and the one pairing function."""

from __future__ import annotations

import hashlib
from typing import Any

from nbscope.record.cells import pair_cells
from nbscope.schema.build import combine_repeats, derive, totals
from nbscope.schema.codec import decode
from nbscope.schema.model import Cell


def cell(source: str, index: int = 0, **figures: Any) -> dict[str, Any]:
    return {
        "index": index,
        "source_hash": hashlib.sha256(source.encode()).hexdigest()[:16],
        "first_line": source.splitlines()[0],
        "status": "ok",
        **figures,
    }


def typed(source: str, index: int = 0, **figures: Any) -> Cell:
    """A cell as a record's readers see it (pairing takes typed cells)."""
    return decode(Cell, cell(source, index, **figures))


def cells(*sources: str) -> list[Cell]:
    return [typed(s, i) for i, s in enumerate(sources)]


def matches(pairs: list[Any]) -> list[tuple[str | None, str | None, str]]:
    return [(p.a.first_line if p.a else None, p.b.first_line if p.b else None, p.match) for p in pairs]


def test_derive_splits_wall_into_compile_run_and_overhead() -> None:
    c = derive({"wall_s": 2.0, "code_s": 1.9, "jax": {"trace_s": 0.1, "lower_s": 0.1, "backend_s": 0.3}})
    assert c["compile_s"] == 0.5
    assert abs(c["run_s"] - 1.4) < 1e-12
    assert abs(c["overhead_s"] - 0.1) < 1e-12
    assert abs(c["compile_s"] + c["run_s"] + c["overhead_s"] - c["wall_s"]) < 1e-12


def test_repeats_derive_run_as_for_a_single_run() -> None:
    runs = [
        [derive({"wall_s": w, "code_s": w - 0.2, "jax": {"backend_s": 0.5}, "status": "ok"})] for w in (2.0, 3.0, 2.5)
    ]
    (combined,) = combine_repeats(runs)
    assert combined["wall_s"] == 2.5
    assert combined["code_s"] == 2.3
    # run = median(code) − compile, the overhead kept apart, exactly as a single run derives it
    assert abs(combined["run_s"] - 1.8) < 1e-12
    assert abs(combined["overhead_s"] - 0.2) < 1e-12
    assert combined["samples"]["wall_s"] == [2.0, 3.0, 2.5]


def test_repeats_keep_the_worst_status() -> None:
    runs = [[{"wall_s": 1.0, "status": "ok"}], [{"wall_s": 1.0, "status": "error", "error": {"name": "E"}}]]
    (combined,) = combine_repeats(runs)
    assert combined["status"] == "error"


def test_totals_ignore_non_numbers() -> None:
    t = totals([{"wall_s": 1.0, "status": "ok"}, {"wall_s": float("nan"), "status": "error"}], {}, "off")
    assert t["wall_s"] == 1.0
    assert (t["cells_ok"], t["cells_failed"]) == (1, 1)


def test_unchanged_cells_pair_by_hash() -> None:
    a = cells("import jax", "x = 1", "y = x")
    assert [p.match for p in pair_cells(a, cells("import jax", "x = 1", "y = x"))] == ["hash"] * 3


def test_edited_cell_pairs_in_place() -> None:
    pairs = pair_cells(cells("import jax", "x = 1", "y = x"), cells("import jax", "x = 2", "y = x"))
    assert matches(pairs) == [
        ("import jax", "import jax", "hash"),
        ("x = 1", "x = 2", "edited"),
        ("y = x", "y = x", "hash"),
    ]
    assert pairs[1].source_changed and not pairs[0].source_changed


def test_moved_cell_pairs_with_itself() -> None:
    a = cells("import jax", "def f(x): return x", "x = 1", "y = f(x)")
    b = cells("import jax", "x = 1", "def f(x): return x", "y = f(x)")
    pairs = pair_cells(a, b)
    assert all(p.paired for p in pairs)
    assert {(p.a.first_line, p.b.first_line) for p in pairs} == {
        (s, s) for s in ("import jax", "def f(x): return x", "x = 1", "y = f(x)")
    }
    assert "moved" in {p.match for p in pairs}


def test_duplicated_cell_pairs_with_its_own_twin() -> None:
    a = [typed("t = time()", 0, wall_s=1.0), typed("f(x)", 1), typed("t = time()", 2, wall_s=2.0)]
    b = [typed("t = time()", 0, wall_s=1.1), typed("f(x)", 1), typed("t = time()", 2, wall_s=2.1)]
    pairs = pair_cells(a, b)
    assert [(p.a.wall_s, p.b.wall_s) for p in pairs if p.a and p.b and p.a.wall_s] == [(1.0, 1.1), (2.0, 2.1)]


def test_removed_and_added_cells_stay_unpaired() -> None:
    pairs = pair_cells(cells("import jax", "print('gone')", "z = 3"), cells("import jax", "z = 3", "plt.show()"))
    assert matches(pairs) == [
        ("import jax", "import jax", "hash"),
        ("print('gone')", None, "only-a"),
        ("z = 3", "z = 3", "hash"),
        (None, "plt.show()", "only-b"),
    ]


def test_cells_without_hash_are_never_equal() -> None:
    a = [decode(Cell, {"index": 0, "first_line": "x = 1"})]
    b = [decode(Cell, {"index": 0, "first_line": "x = 1"})]
    assert [p.match for p in pair_cells(a, b)] == ["edited"]


def _record(cells_: list[dict[str, Any]]) -> Any:
    from nbscope.record.run import RunRecord

    return RunRecord(
        kind="profile",
        target="nb.ipynb",
        fingerprint={"digest": "d"},
        command=["test"],
        measurements={"cells": cells_, "totals": {"wall_s": sum(c["wall_s"] for c in cells_)}},
    )


def test_compare_gate_and_report_agree_on_the_pairing() -> None:
    from nbscope.analyse.compare import compare
    from nbscope.analyse.gate import gate
    from nbscope.analyse.report import report_data

    def figures(i: int, source: str, wall: float) -> dict[str, Any]:
        return cell(source, i, wall_s=wall, compile_s=0.0, run_s=wall)

    # Edited in place ("x = 1", the last cell), moved to the end ("def f"), a duplicated source ("t = time()").
    a = _record(
        [
            figures(0, "import jax", 1.0),
            figures(1, "def f(x): return x", 1.1),
            figures(2, "x = 1", 1.2),
            figures(3, "t = time()", 1.3),
            figures(4, "y = f(x)", 1.4),
            figures(5, "t = time()", 1.5),
            figures(6, "print('gone')", 1.6),
        ]
    )
    b = _record(
        [
            figures(0, "import jax", 2.0),
            figures(1, "x = 2", 2.2),
            figures(2, "t = time()", 2.3),
            figures(3, "y = f(x)", 2.4),
            figures(4, "t = time()", 2.5),
            figures(5, "plt.show()", 2.7),
            figures(6, "def f(x): return x", 2.1),
        ]
    )
    expected = {(1.0, 2.0), (1.1, 2.1), (1.2, 2.2), (1.3, 2.3), (1.4, 2.4), (1.5, 2.5), (1.6, 2.7)}
    pairs = compare(a, b).pairs
    assert {p.match for p in pairs} == {"hash", "moved", "edited"}
    by_compare = {(p.a.wall_s, p.b.wall_s) for p in pairs if p.paired}
    by_gate = {(c.base_s, c.cand_s) for c in gate(a, b).cells if c.base_s is not None and c.cand_s is not None}
    report = report_data([a, b])
    by_report = {(row[0].wall_s, row[1].wall_s) for row in report.side_by_side if None not in row}
    assert by_compare == by_gate == by_report == expected
