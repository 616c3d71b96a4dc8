"""Rule slow-first-call across cells: a first call and the next cell's identical call are paired by what they
run (the notebook's function, the same arguments), whatever wraps them: ``with Timer():``, ``%time``, prints.

tests/files/diag_first_call_across.ipynb: ``table`` is cached (functools.lru_cache), so the first call of each
size computes 5 M Python steps (0.3 s or more on any machine) and the repeat returns from the cache (µs).
The clean notebook computes on every call. Thresholds sit far from both: a gap of 0.1 s and a ratio of 5, where
the cached notebook's ratio is in the hundreds and the clean one's is near 1.
"""

from __future__ import annotations

import pytest

from diag_support import assert_compact, edited, fired, profile_notebook, sources_of, with_code
from nbscope.analyse.diagnose import diagnose

LOW = {"slow-first-call": {"min_ratio": 5.0, "min_gap_s": 0.1}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("first-across")
    return {name: profile_notebook(name, folder) for name in ("diag_first_call_across", "diag_first_call_across_clean")}


@pytest.mark.slow
def test_first_calls_pair_with_the_next_cells_call_whatever_wraps_them(runs: dict) -> None:
    record = runs["diag_first_call_across"]
    cells = record.measurements["cells"]
    assert all(c["status"] == "ok" for c in cells)
    found = fired(diagnose(record, thresholds=LOW), "slow-first-call")
    assert_compact(found, record)
    by_cell = {f.cell_index: f for f in found}
    # `n = ...; with Timer(): y = table(n)` then `with Timer(): y = table(n); print(y)`
    # and `%time z = table(n + 1)` then `with Timer(): z = table(n + 1)`
    assert sorted(by_cell) == [2, 4]
    assert by_cell[2].evidence["repeat_cell"] == 3 and by_cell[4].evidence["repeat_cell"] == 5
    for first, finding in by_cell.items():
        assert finding.evidence["first_s"] == pytest.approx(cells[first]["wall_s"], abs=1e-3)
        assert finding.evidence["repeat_s"] == pytest.approx(cells[first + 1]["wall_s"], abs=1e-3)
        assert "table(…) on names not rebound in between" in finding.evidence["same_call"]
        assert "no compile" in finding.summary and finding.evidence["other_work"] == []


@pytest.mark.slow
def test_silent_when_every_call_computes(runs: dict) -> None:
    record = runs["diag_first_call_across_clean"]
    assert all(c["status"] == "ok" for c in record.measurements["cells"])
    assert not fired(diagnose(record, thresholds=LOW), "slow-first-call")


@pytest.mark.slow
def test_other_arguments_or_a_rebound_name_are_not_a_repeat(runs: dict) -> None:
    record = edited(runs["diag_first_call_across"])
    sources = sources_of("diag_first_call_across")
    hashes = [c["source_hash"] for c in record.measurements["cells"]]
    sources[hashes[3]] = "with Timer():\n    y = table(n - 1)"  # other arguments: another call
    sources[hashes[5]] = "n = 7\nwith Timer():\n    z = table(n + 1)"  # n rebound in the repeat's own cell
    found = fired(diagnose(with_code(record, sources), thresholds=LOW), "slow-first-call")
    assert [f.cell_index for f in found] == [], [f.summary for f in found]


@pytest.mark.slow
def test_other_work_in_the_first_cell_is_named(runs: dict) -> None:
    record = edited(runs["diag_first_call_across"])
    sources = sources_of("diag_first_call_across")
    hashes = [c["source_hash"] for c in record.measurements["cells"]]
    sources[hashes[2]] = "n = 5_000_000\ngrid = list(range(n))\n\nwith Timer():\n    y = table(n)"
    [finding] = fired(diagnose(with_code(record, sources), thresholds=LOW), "slow-first-call", 2)
    assert finding.evidence["other_work"] == ["grid = list(range(n))"]
    assert "the cell also runs `grid = list(range(n))`: part of the gap may be theirs" in finding.summary


@pytest.mark.slow
def test_the_lectures_figures_fire_at_the_default_thresholds(runs: dict) -> None:
    """The issue's real-lecture figures on a GPU: a first call of 68 s, 3.3 s of it compile; the next cell's
    identical call inside the same timer context, 23 s, with an eager compile of its own (not the function's)."""
    record = edited(runs["diag_first_call_across"])
    first, repeat = record.measurements["cells"][2], record.measurements["cells"][3]
    first.update(wall_s=68.0, compile_s=3.3)
    repeat.update(
        wall_s=23.0,
        compile_s=0.05,
        jax={
            "compiles": 1,
            "eager_compiles": 1,
            "user_compiles": 0,
            "functions": [{"name": "_where", "kind": "eager", "count": 1}],
        },
    )
    [finding] = fired(diagnose(record), "slow-first-call", 2)
    assert finding.evidence["repeat_cell"] == 3
    assert finding.evidence["first_s"] == pytest.approx(68.0) and finding.evidence["first_compile_s"] == pytest.approx(
        3.3
    )
    assert finding.evidence["gap_s"] == pytest.approx(68.0 - 3.3 - (23.0 - 0.05))
    assert "not compile (3.30 s)" in finding.summary
