"""Rule compile-bound: a cell whose time is mostly compilation, vs a cell with one compile and real work."""

from __future__ import annotations

import pytest

from diag_support import fired, profile_notebook
from nbscope.analyse.diagnose import diagnose


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("compile")
    return {name: profile_notebook(name, folder) for name in ("diag_unrolled_loop", "diag_compute_bound")}


def test_fires_on_the_compiling_cell_and_points_to_the_cause(runs: dict) -> None:
    record = runs["diag_unrolled_loop"]
    findings = diagnose(record)
    [finding] = fired(findings, "compile-bound")
    cell = record.measurements["cells"][1]
    assert finding.cell_index == 1
    assert finding.evidence["compile_s"] == pytest.approx(cell["compile_s"], abs=1e-3)
    assert finding.evidence["compile_share"] >= 0.5
    assert finding.evidence["compiled"][0]["name"] == "simulate"
    assert finding.evidence["see_also"] == ["unrolled-loop"]
    # The specific cause is listed before the generic symptom.
    order = [f.rule for f in findings]
    assert order.index("unrolled-loop") < order.index("compile-bound")


def test_silent_on_a_compute_bound_cell(runs: dict) -> None:
    assert not fired(diagnose(runs["diag_compute_bound"]), "compile-bound")
